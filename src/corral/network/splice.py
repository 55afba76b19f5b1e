"""Copying bytes between two sockets in the kernel (``splice(2)`` through a pipe), on asyncio.

``copy(src, dst, limit)`` moves bytes from one connected socket to another without bringing them
into Python: ``splice`` moves them from ``src`` into a pipe and from the pipe into ``dst``, as
much as the pipe holds (1 MiB when the kernel allows it) per call. It waits on the event loop
(``add_reader``/``add_writer``) only when neither side can move, so a fast transfer costs two
system calls per pipeful and no copy in user space. Used by the inbound proxy and the egress
proxy's plain (not intercepted) connections.

Both sockets must be non-blocking. ``copy`` returns when ``limit`` bytes have been moved, or,
without a limit, at the end of ``src`` (its peer shut down writing); an error on either socket
(reset, broken pipe) is raised as the ``OSError`` it is. It yields to the loop at least every
``YIELD_EVERY`` bytes so that one fast transfer does not starve the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket

__all__ = ["PIPE_SIZE", "copy"]

PIPE_SIZE = 1 << 20
YIELD_EVERY = 8 << 20
_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _pipe() -> tuple[int, int, int]:
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        size = fcntl.fcntl(write_end, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:  # over /proc/sys/fs/pipe-max-size for this user: the default pipe
        size = 65536
    return read_end, write_end, size


async def _wait(
    loop: asyncio.AbstractEventLoop, read_fd: int | None, write_fd: int | None, idle: float | None
) -> None:
    """Until ``read_fd`` is readable or ``write_fd`` writable (whichever is given, first);
    TimeoutError after ``idle`` seconds."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if read_fd is not None:
        loop.add_reader(read_fd, wake)
    if write_fd is not None:
        loop.add_writer(write_fd, wake)
    try:
        await asyncio.wait_for(ready, idle)
    finally:
        if read_fd is not None:
            loop.remove_reader(read_fd)
        if write_fd is not None:
            loop.remove_writer(write_fd)


async def copy(
    src: socket.socket, dst: socket.socket, limit: int | None = None, *, idle: float | None = None
) -> int:
    """Move ``limit`` bytes (None: until the end of ``src``) from ``src`` to ``dst``; returns how
    many were moved. TimeoutError when nothing moves for ``idle`` seconds."""
    loop = asyncio.get_running_loop()
    src_fd, dst_fd = src.fileno(), dst.fileno()
    read_end, write_end, capacity = _pipe()
    moved = in_pipe = since_yield = 0
    ended = limit == 0
    try:
        while True:
            progress = False
            if not ended and in_pipe < capacity:
                want = capacity - in_pipe
                if limit is not None:
                    want = min(want, limit - moved - in_pipe)
                try:
                    got = os.splice(src_fd, write_end, want, flags=_FLAGS)
                except BlockingIOError:
                    got = -1
                if got == 0:
                    ended = True
                elif got > 0:
                    in_pipe += got
                    progress = True
                    if limit is not None and moved + in_pipe >= limit:
                        ended = True
            if in_pipe:
                try:
                    sent = os.splice(read_end, dst_fd, in_pipe, flags=_FLAGS)
                except BlockingIOError:
                    sent = 0
                if sent:
                    in_pipe -= sent
                    moved += sent
                    since_yield += sent
                    progress = True
            if ended and not in_pipe:
                return moved
            if progress:
                if since_yield >= YIELD_EVERY:
                    since_yield = 0
                    await asyncio.sleep(0)
                continue
            if ended or in_pipe >= capacity:
                await _wait(loop, None, dst_fd, idle)
            elif in_pipe:
                await _wait(loop, src_fd, dst_fd, idle)
            else:
                await _wait(loop, src_fd, None, idle)
    finally:
        with contextlib.suppress(OSError):
            os.close(read_end)
        with contextlib.suppress(OSError):
            os.close(write_end)
