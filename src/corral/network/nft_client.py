"""The daemon's end of the nftables worker process (``nft_worker.py``): every libnftables command
of the daemon runs there, in the calling thread's network namespace.

libnftables waits on its netlink socket with ``select()``, which only takes descriptors below
1024; the daemon holds more than that with a few hundred sandboxes, and a context made in the
daemon then aborted the process (see ``nft_worker``). The alternatives measured against:

- one long-lived context made at start while descriptors are low: a context is bound to the
  namespace it was made in, and every slot is a namespace of its own, made when the daemon is
  already full; its socket would get whatever descriptor is lowest then;
- the ``nft`` program per call: a process start per commit (~5-10 ms here, more under load);
- a worker with a small descriptor table: one process start per daemon, a socket round trip
  per command, and the bound holds whatever the daemon's descriptor count.

Invariants: one request at a time on the channel (``_lock``); a request carries the caller's
namespace descriptor, so the worker needs no state between requests and a command is safe to
send again; the worker is started on first use and again when it died (the command is then
retried once: every command corral sends is idempotent, a ruleset is a delete-and-redefine
transaction and the rest are reads); an answer that does not come within ``timeout`` seconds
kills the worker and fails the call.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from corral.network.base import NetworkFailure

__all__ = ["NftChannel", "NftWorkerError", "run"]

MAX_ANSWER = 64 << 20
_HEADER = struct.Struct("!I")
_WORKER = Path(__file__).with_name("nft_worker.py")


class NftWorkerError(NetworkFailure):
    """The nftables worker could not be started, died twice in a row or did not answer."""


class NftChannel:
    """A channel to one nftables worker process, started on first use (see the module doc)."""

    def __init__(self, timeout: float = 60.0) -> None:
        self._timeout = timeout
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None

    @property
    def worker_pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def run(self, commands: str, *, json_output: bool = False) -> tuple[int, str, str]:
        """Run ``commands`` in the calling thread's network namespace; nft's (rc, output, error)."""
        body = json.dumps({"commands": commands, "json": json_output}).encode()
        namespace = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            with self._lock:
                try:
                    answer = self._exchange(namespace, body)
                except (OSError, EOFError) as first:
                    if isinstance(first, TimeoutError):
                        self._stop()
                        raise NftWorkerError(
                            f"the nftables worker did not answer within {self._timeout:g} s"
                        ) from first
                    self._stop()  # it died: start another and send the command again
                    try:
                        answer = self._exchange(namespace, body)
                    except (OSError, EOFError) as exc:
                        self._stop()
                        raise NftWorkerError(f"the nftables worker failed: {exc}") from exc
        finally:
            os.close(namespace)
        return int(answer["rc"]), str(answer["output"]), str(answer["error"])

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _exchange(self, namespace: int, body: bytes) -> dict[str, Any]:
        channel = self._channel()
        socket.send_fds(channel, [_HEADER.pack(len(body))], [namespace])
        channel.sendall(body)
        (length,) = _HEADER.unpack(_read(channel, _HEADER.size))
        if length > MAX_ANSWER:
            raise EOFError(f"an answer of {length} bytes")
        answer = json.loads(_read(channel, length))
        if not isinstance(answer, dict) or not {"rc", "output", "error"} <= answer.keys():
            raise EOFError("a malformed answer")
        return answer

    def _channel(self) -> socket.socket:
        if self._socket is not None:
            return self._socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # -I: nothing of the environment or the current directory; close_fds (the default)
            # hands it no descriptor of the daemon's but its end of the channel.
            self._process = subprocess.Popen(
                [sys.executable, "-I", str(_WORKER)],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            raise NftWorkerError(f"starting the nftables worker: {exc}") from exc
        finally:
            theirs.close()
        ours.settimeout(self._timeout)
        self._socket = ours
        return ours

    def _stop(self) -> None:
        if self._socket is not None:
            self._socket.close()  # the worker ends at EOF
            self._socket = None
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _read(channel: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = channel.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the nftables worker closed the channel")
        data += chunk
    return bytes(data)


_shared: NftChannel | None = None
_shared_lock = threading.Lock()


def run(commands: str, *, json_output: bool = False) -> tuple[int, str, str]:
    """Run ``commands`` through the process's shared worker (started on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = NftChannel()
        channel = _shared
    return channel.run(commands, json_output=json_output)
