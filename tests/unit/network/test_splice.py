"""network/splice.py on loopback TCP: exact counts, the end of the source, idle timeouts."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from corral.network import splice


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
    for sock in (a, b):
        sock.setblocking(False)
    return a, b


async def read_all(sock: socket.socket, size: int | None = None) -> bytes:
    loop = asyncio.get_running_loop()
    got = bytearray()
    while size is None or len(got) < size:
        data = await loop.sock_recv(sock, 1 << 20)
        if not data:
            break
        got += data
    return bytes(got)


async def test_copies_exactly_the_limit_and_leaves_the_rest() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    payload = os.urandom(3 << 20)
    sending = asyncio.create_task(loop.sock_sendall(src_peer, payload + b"NEXT"))
    receiving = asyncio.create_task(read_all(dst_peer, len(payload)))
    moved = await splice.copy(src, dst, len(payload))
    assert moved == len(payload)
    assert await receiving == payload
    await sending
    assert await loop.sock_recv(src, 4) == b"NEXT"  # not one byte more was taken
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()


async def test_copies_to_the_end_of_the_source() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    payload = os.urandom(5 << 20)

    async def send() -> None:
        await loop.sock_sendall(src_peer, payload)
        src_peer.shutdown(socket.SHUT_WR)

    receiving = asyncio.create_task(read_all(dst_peer, len(payload)))
    sending = asyncio.create_task(send())
    assert await splice.copy(src, dst) == len(payload)
    assert await receiving == payload
    await sending
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()


async def test_nothing_moving_for_idle_seconds_is_a_timeout() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    with pytest.raises(TimeoutError):
        await splice.copy(src, dst, idle=0.05)
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()
