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
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import struct
import sys
import threading
from typing import Any

import nftables

MAX_REQUEST = 16 << 20
_HEADER = struct.Struct("!I")
_CLONE_NEWNET = 0x40000000


def serve(channel: socket.socket) -> None:
    """Answer requests until the daemon closes its end (or sends something malformed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    while True:
        request = _receive(channel)
        if request is None:
            return
        namespace, body = request
        try:
            answer = _execute(libc, namespace, body)
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


def _execute(libc: ctypes.CDLL, namespace: int, request: dict[str, Any]) -> dict[str, Any]:
    # Every request names its namespace, so the worker's one thread simply moves there.
    if libc.setns(namespace, _CLONE_NEWNET) != 0:
        error = os.strerror(ctypes.get_errno())
        return {"rc": -1, "output": "", "error": f"entering the caller's namespace: {error}"}
    try:
        context = nftables.Nftables()
    except OSError as exc:
        return {"rc": -1, "output": "", "error": f"loading libnftables: {exc}"}
    context.set_json_output(bool(request.get("json")))
    rc, output, error = context.cmd(request["commands"])
    holder = [context]
    del context  # the thread must hold the only reference, or this frame frees it on return
    _free_in_background(holder)
    return {"rc": int(rc), "output": output or "", "error": error or ""}


def _free_in_background(holder: list[Any]) -> None:
    # Freeing a context that committed closes its netlink socket, and that close waits for the
    # kernel's deferred transaction cleanup (an RCU grace period: 5-12 ms measured here). The
    # rules are in force already, so a short-lived thread takes the only reference and frees it.
    # Only reference: were the caller to keep one (a local), the thread would drop its own
    # first and the free, with its wait, would happen in the caller after all.
    threading.Thread(target=holder.clear, name="nft-free", daemon=True).start()


def main() -> None:
    channel = socket.socket(fileno=0)
    try:
        serve(channel)
    except (OSError, ValueError) as exc:  # the daemon went away mid-answer, or sent garbage
        print(f"nft worker: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
