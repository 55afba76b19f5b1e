"""The nftables worker: a small process that runs libnftables commands for the daemon, each in the
network namespace its request names, with a file descriptor table that stays small.

Why a process of its own: libnftables 1.0.6 (Debian 12) waits for the kernel's answers to a
batch with ``select()``, whose ``fd_set`` holds only descriptors below ``FD_SETSIZE`` (1024). A
daemon holding hundreds of sandboxes has more descriptors open than that, so a context it made
got a netlink socket above 1023 and glibc's fortify check aborted the whole daemon ("bit out of
range 0 - FD_SETSIZE on fd_set", seen at 251 sandboxes). This process holds its channel, the
namespace descriptor of the request in hand and the netlink sockets of the contexts it made (a
few, while they are freed), so every descriptor libnftables sees is far below 1024 whatever the
daemon holds. The daemon's end is ``nft_client.NftChannel``.

Protocol, one request at a time on fd 0 (an ``AF_UNIX`` stream socket the daemon made)::

    request  4-byte big-endian length, then JSON {"commands": str, "json": bool}; the caller's
             network namespace descriptor travels as SCM_RIGHTS with the length
    answer   4-byte big-endian length, then JSON {"rc": int, "output": str, "error": str}

A request over ``MAX_REQUEST`` bytes, or without a namespace, ends the worker (the daemon then
starts another). The worker ends when the daemon closes its end. It imports nothing of corral:
it runs as a script (``python -I nft_worker.py``), so starting it costs only Python and
libnftables.

libnftables is called through ``ctypes`` bindings made once (``Libnftables``), not through the
``nftables`` Python binding, which binds every function again for each context it makes (0.6 ms
a request, measured, against 0.07 ms for the context itself). A context is made per request
(its netlink socket belongs to the namespace it was made in) and freed by one long-lived
thread after the answer is sent (see ``Libnftables.free_later``).
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import socket
import struct
import sys
import threading
from ctypes import c_char_p, c_int, c_uint, c_void_p
from typing import Any

MAX_REQUEST = 16 << 20
_HEADER = struct.Struct("!I")
_CLONE_NEWNET = 0x40000000
_OUTPUT_JSON = 1 << 4  # NFT_CTX_OUTPUT_JSON
_MAX_PENDING = 32


class Libnftables:
    """The few libnftables functions the worker calls, bound once; ``run`` makes a context,
    runs commands in it (output and errors buffered) and hands the context to the freeing
    thread (``free_later``)."""

    def __init__(self, sofile: str = "libnftables.so.1") -> None:
        lib = ctypes.CDLL(sofile)
        self._new = _bind(lib.nft_ctx_new, c_void_p, c_int)
        self._free = _bind(lib.nft_ctx_free, None, c_void_p)
        self._buffer_output = _bind(lib.nft_ctx_buffer_output, c_int, c_void_p)
        self._buffer_error = _bind(lib.nft_ctx_buffer_error, c_int, c_void_p)
        self._output = _bind(lib.nft_ctx_get_output_buffer, c_char_p, c_void_p)
        self._error = _bind(lib.nft_ctx_get_error_buffer, c_char_p, c_void_p)
        self._get_flags = _bind(lib.nft_ctx_output_get_flags, c_uint, c_void_p)
        self._set_flags = _bind(lib.nft_ctx_output_set_flags, None, c_void_p, c_uint)
        self._run = _bind(lib.nft_run_cmd_from_buffer, c_int, c_void_p, c_char_p)
        self._freeing: queue.SimpleQueue[int] = queue.SimpleQueue()
        threading.Thread(target=self._free_forever, name="nft-free", daemon=True).start()

    def run(self, commands: str, json_output: bool) -> tuple[int, str, str]:
        """(In the namespace to act on.) nft's (rc, output, error) for ``commands``."""
        context = self._new(0)
        if not context:
            return -1, "", "libnftables could not make a context"
        try:
            self._buffer_output(context)
            self._buffer_error(context)
            if json_output:
                self._set_flags(context, self._get_flags(context) | _OUTPUT_JSON)
            rc = self._run(context, commands.encode())
            output, error = self._output(context) or b"", self._error(context) or b""
        finally:
            self.free_later(context)
        return int(rc), output.decode(), error.decode()

    def free_later(self, context: int) -> None:
        """Freeing a context that committed closes its netlink socket, and that close waits
        for the kernel's deferred transaction cleanup (an RCU grace period: 5-12 ms measured
        here). The rules are in force already, so the answer goes first and one long-lived
        thread frees the contexts in turn (a thread per context cost 0.14 ms to start). Past
        ``_MAX_PENDING`` contexts waiting (their sockets are descriptors of this process, which
        must stay few) it is freed here."""
        if self._freeing.qsize() >= _MAX_PENDING:
            self._free(context)
        else:
            self._freeing.put(context)

    def _free_forever(self) -> None:
        while True:
            self._free(self._freeing.get())


def _bind(function: Any, restype: Any, *argtypes: Any) -> Any:
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


def serve(channel: socket.socket) -> None:
    """Answer requests until the daemon closes its end (or sends something malformed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        nft: Libnftables | OSError = Libnftables()
    except OSError as exc:  # every request is answered with it
        nft = exc
    while True:
        request = _receive(channel)
        if request is None:
            return
        namespace, body = request
        try:
            answer = _execute(libc, nft, namespace, body)
        finally:
            os.close(namespace)
        data = json.dumps(answer).encode()
        channel.sendall(_HEADER.pack(len(data)) + data)


def _receive(channel: socket.socket) -> tuple[int, dict[str, Any]] | None:
    header, fds, _, _ = socket.recv_fds(channel, _HEADER.size, 1)
    if not header:
        return None
    while len(header) < _HEADER.size:
        more = channel.recv(_HEADER.size - len(header))
        if not more:
            break
        header += more
    (length,) = _HEADER.unpack(header) if len(header) == _HEADER.size else (MAX_REQUEST + 1,)
    if len(fds) != 1 or length > MAX_REQUEST:
        for fd in fds:
            os.close(fd)
        return None
    body = bytearray()
    while len(body) < length:
        chunk = channel.recv(min(length - len(body), 1 << 20))
        if not chunk:
            os.close(fds[0])
            return None
        body += chunk
    request = json.loads(body)
    if not isinstance(request, dict) or not isinstance(request.get("commands"), str):
        os.close(fds[0])
        return None
    return fds[0], request


def _execute(
    libc: ctypes.CDLL, nft: Libnftables | OSError, namespace: int, request: dict[str, Any]
) -> dict[str, Any]:
    # Every request names its namespace, so the worker's one thread simply moves there.
    if libc.setns(namespace, _CLONE_NEWNET) != 0:
        error = os.strerror(ctypes.get_errno())
        return {"rc": -1, "output": "", "error": f"entering the caller's namespace: {error}"}
    if isinstance(nft, OSError):
        return {"rc": -1, "output": "", "error": f"loading libnftables: {nft}"}
    rc, output, error = nft.run(request["commands"], bool(request.get("json")))
    return {"rc": rc, "output": output, "error": error}


def main() -> None:
    channel = socket.socket(fileno=0)
    try:
        serve(channel)
    except (OSError, ValueError) as exc:  # the daemon went away mid-answer, or sent garbage
        print(f"nft worker: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
