"""network/splice.py on loopback TCP: exact counts, the end of the source, idle timeouts, and the
same for a bulk transfer that goes on in a thread of its own (which never outlives the copy),
driven by splice_pump.c (built by scripts/setup) and by the Python loop that stands in for it."""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import struct
import threading

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


def threads_of_splice() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "corral-splice"]


@pytest.fixture(params=["native", "python"], autouse=True)
def thread_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the bulk loop in C (which scripts/setup builds) and in Python."""
    if request.param == "native":
        assert splice.native_drive() is not None, f"{splice.NATIVE_LIBRARY}: run scripts/setup"
    else:
        monkeypatch.setattr(splice, "native_drive", lambda: None)
    return str(request.param)


async def test_a_bulk_transfer_goes_on_in_a_thread_and_arrives_intact() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    first, rest = os.urandom(splice.THREAD_AFTER * 2), os.urandom(splice.THREAD_AFTER * 2)
    copying = asyncio.create_task(splice.copy(src, dst))
    await loop.sock_sendall(src_peer, first)
    # At most a pipeful past THREAD_AFTER moves on the loop; the rest of ``first`` did not.
    assert await read_all(dst_peer, len(first)) == first
    assert len(threads_of_splice()) == 1
    await loop.sock_sendall(src_peer, rest)
    src_peer.shutdown(socket.SHUT_WR)
    assert await read_all(dst_peer, len(rest)) == rest
    assert await copying == len(first) + len(rest)
    assert threads_of_splice() == []
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()


async def test_cancelling_a_threaded_copy_stops_its_thread_before_it_returns() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    payload = os.urandom(splice.THREAD_AFTER * 2)
    copying = asyncio.create_task(splice.copy(src, dst))
    await loop.sock_sendall(src_peer, payload)
    assert await read_all(dst_peer, len(payload)) == payload
    assert len(threads_of_splice()) == 1  # moved to its thread, now waiting for more
    copying.cancel()
    with pytest.raises(asyncio.CancelledError):
        await copying
    assert threads_of_splice() == []  # so closing the sockets now cannot race it
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()


async def test_cancelling_a_threaded_copy_that_never_waits_stops_it() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    block = os.urandom(1 << 20)
    received = 0
    flowing = asyncio.Event()

    async def send_forever() -> None:
        while True:
            await loop.sock_sendall(src_peer, block)

    async def drain_forever() -> None:
        nonlocal received
        while True:
            received += len(await loop.sock_recv(dst_peer, 1 << 20))
            if received > splice.THREAD_AFTER * 2:
                flowing.set()

    tasks = [asyncio.create_task(send_forever()), asyncio.create_task(drain_forever())]
    copying = asyncio.create_task(splice.copy(src, dst))
    await flowing.wait()
    assert len(threads_of_splice()) == 1
    copying.cancel()
    # The bytes keep flowing while the cancellation waits for the thread, which stops between
    # two moves (wait_for only keeps a broken copy from hanging the suite).
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(copying, 30)
    assert threads_of_splice() == []
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()


async def test_a_reset_destination_fails_a_threaded_copy() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    copying = asyncio.create_task(splice.copy(src, dst))
    first = os.urandom(splice.THREAD_AFTER * 2)
    await loop.sock_sendall(src_peer, first)
    assert await read_all(dst_peer, len(first)) == first
    dst_peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    dst_peer.close()  # a reset: the next bytes cannot be delivered
    sending = asyncio.create_task(loop.sock_sendall(src_peer, os.urandom(1 << 20)))
    with pytest.raises(OSError):
        await copying
    sending.cancel()
    for sock in (src_peer, src, dst):
        sock.close()


async def test_a_threaded_copy_idle_for_idle_seconds_is_a_timeout() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    copying = asyncio.create_task(splice.copy(src, dst, idle=0.2))
    payload = os.urandom(splice.THREAD_AFTER * 2)
    await loop.sock_sendall(src_peer, payload)
    assert await read_all(dst_peer, len(payload)) == payload
    with pytest.raises(TimeoutError):
        await copying
    assert threads_of_splice() == []
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


# The Python loop needs the GIL for every move: that is why the C one exists.
@pytest.mark.parametrize("thread_loop", ["native"], indirect=True)
async def test_the_native_loop_moves_bytes_while_another_thread_holds_the_gil() -> None:
    src_peer, src = tcp_pair()
    dst, dst_peer = tcp_pair()
    loop = asyncio.get_running_loop()
    copying = asyncio.create_task(splice.copy(src, dst))
    first = os.urandom(splice.THREAD_AFTER * 2)
    await loop.sock_sendall(src_peer, first)
    assert await read_all(dst_peer, len(first)) == first
    assert len(threads_of_splice()) == 1  # in its thread, waiting for more
    src_peer.send(b"x" * 1000)
    # poll(2) through PyDLL keeps the GIL for the whole wait (30 s only bounds a broken build):
    # dst_peer turns readable only if the copy moves those bytes while this thread holds it.
    libc_holding_the_gil = ctypes.PyDLL(None)
    waiting = _PollFd(dst_peer.fileno(), 0x001, 0)  # POLLIN
    assert libc_holding_the_gil.poll(ctypes.byref(waiting), 1, 30_000) == 1
    assert await read_all(dst_peer, 1000) == b"x" * 1000
    src_peer.shutdown(socket.SHUT_WR)
    assert await copying == len(first) + 1000
    for sock in (src_peer, src, dst, dst_peer):
        sock.close()
