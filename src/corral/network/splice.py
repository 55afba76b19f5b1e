"""Copying bytes between two sockets in the kernel (``splice(2)`` through a pipe), on asyncio.

``copy(src, dst, limit)`` moves bytes from one connected socket to another without bringing them
into Python: ``splice`` moves them from ``src`` into a pipe and from the pipe into ``dst``, as
much as the pipe holds (1 MiB when the kernel allows it) per call. Used by the inbound proxy and
the egress proxy's plain (not intercepted) connections.

A direction starts on the event loop: it waits there (``add_reader``/``add_writer``) only when
neither side can move, so a short exchange costs two system calls per pipeful and no thread. Once
it has moved ``THREAD_AFTER`` bytes it is a bulk transfer, and the rest of it is driven by a
thread of its own that waits in ``poll(2)``: per pipeful that costs a system call instead of a
future, a timer and two ``epoll_ctl`` on the loop, which more than halves the proxy's own CPU
time per GiB (bench/network.py). So there is at most one thread per bulk direction, and none
for the many short ones; if no thread can be started, the copy goes on on the loop.

The thread's loop is ``splice_pump.c`` (built by ``scripts/build-pump`` beside this file, loaded
through ``ctypes`` on first use), which runs the whole direction in one call without the GIL: a
loop in Python takes the GIL back after every ``splice`` and ``poll``, and in the daemon, whose
event loop and other threads run Python, each of those waits up to the interpreter's switch
interval (bench/README.md measured the proxied throughput halved by one busy Python thread).
Without the library (no C compiler where it was set up) the same loop runs in Python.

Both sockets must be non-blocking. ``copy`` returns when ``limit`` bytes have been moved, or,
without a limit, at the end of ``src`` (its peer shut down writing); an error on either socket
(reset, broken pipe) is raised as the ``OSError`` it is. On the loop it yields at least every
``YIELD_EVERY`` bytes so that one fast transfer does not starve the others. Cancelling ``copy``
stops its thread (woken through a pipe of its own) before the cancellation goes on, so the
caller may close both sockets as soon as ``copy`` has ended, however it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import functools
import math
import os
import select
import socket
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["NATIVE_LIBRARY", "PIPE_SIZE", "THREAD_AFTER", "copy", "native_drive"]

PIPE_SIZE = 1 << 20
YIELD_EVERY = 8 << 20
THREAD_AFTER = 2 << 20
_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
NATIVE_LIBRARY = Path(__file__).with_name("splice_pump.so")


class _State(ctypes.Structure):
    """``struct corral_pump`` of splice_pump.c, field for field."""

    _fields_ = [
        ("src", ctypes.c_int32),
        ("dst", ctypes.c_int32),
        ("read_end", ctypes.c_int32),
        ("write_end", ctypes.c_int32),
        ("capacity", ctypes.c_int64),
        ("limit", ctypes.c_int64),
        ("moved", ctypes.c_int64),
        ("in_pipe", ctypes.c_int64),
        ("ended", ctypes.c_int32),
        ("stopped", ctypes.c_int32),
    ]


_NativeDrive = Callable[..., int]  # (pointer to _State, stop_fd, idle_ms) -> outcome


@functools.cache
def native_drive() -> _NativeDrive | None:
    """``corral_pump_drive`` of the built library, or None when there is none."""
    try:
        library = ctypes.CDLL(str(NATIVE_LIBRARY))  # CDLL: the GIL is released during calls
    except OSError:
        return None
    drive = library.corral_pump_drive
    drive.argtypes = [ctypes.POINTER(_State), ctypes.c_int, ctypes.c_int]
    drive.restype = ctypes.c_int
    return drive


def _pipe() -> tuple[int, int, int]:
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        size = fcntl.fcntl(write_end, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:  # over /proc/sys/fs/pipe-max-size for this user: the default pipe
        size = 65536
    return read_end, write_end, size


class _Pump:
    """One direction's state: its pipe, what the pipe holds, what has been moved. Driven by one
    caller at a time (the loop, then possibly a thread), never by two at once."""

    def __init__(self, src_fd: int, dst_fd: int, limit: int | None) -> None:
        self.src_fd, self.dst_fd, self.limit = src_fd, dst_fd, limit
        self.read_end, self.write_end, self.capacity = _pipe()
        self.moved = self.in_pipe = 0
        self.ended = limit == 0
        self.stopped = False  # set by the loop to stop a thread that drives this pump
        self.native: _State | None = None  # while splice_pump.c drives it

    def stop(self) -> None:
        """Have the thread that drives this pump return before its next move."""
        self.stopped = True
        if self.native is not None:
            self.native.stopped = 1

    @property
    def done(self) -> bool:
        return self.ended and not self.in_pipe

    def move(self) -> bool:
        """One splice in and one out, as far as both sides allow; whether anything moved."""
        progress = False
        if not self.ended and self.in_pipe < self.capacity:
            want = self.capacity - self.in_pipe
            if self.limit is not None:
                want = min(want, self.limit - self.moved - self.in_pipe)
            try:
                got = os.splice(self.src_fd, self.write_end, want, flags=_FLAGS)
            except BlockingIOError:
                got = -1
            if got == 0:
                self.ended = True
            elif got > 0:
                self.in_pipe += got
                progress = True
                if self.limit is not None and self.moved + self.in_pipe >= self.limit:
                    self.ended = True
        if self.in_pipe:
            try:
                sent = os.splice(self.read_end, self.dst_fd, self.in_pipe, flags=_FLAGS)
            except BlockingIOError:
                sent = 0
            if sent:
                self.in_pipe -= sent
                self.moved += sent
                progress = True
        return progress

    def waits_for(self) -> tuple[int | None, int | None]:
        """What to wait for when nothing moved: (``src`` readable, ``dst`` writable)."""
        if self.ended or self.in_pipe >= self.capacity:
            return None, self.dst_fd
        return self.src_fd, (self.dst_fd if self.in_pipe else None)

    def close(self) -> None:
        for fd in (self.read_end, self.write_end):
            with contextlib.suppress(OSError):
                os.close(fd)


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


def _drive(pump: _Pump, idle: float | None, stop_fd: int) -> None:
    """In a thread: move until done, waiting in poll(2); returns early once the copy is cancelled
    (``pump.stopped``, checked between moves: a transfer that never waits stops too; ``stop_fd``
    readable wakes a wait)."""
    timeout = None if idle is None else idle * 1000
    while not pump.done and not pump.stopped:
        if pump.move():
            continue
        read_fd, write_fd = pump.waits_for()
        poller = select.poll()
        poller.register(stop_fd, select.POLLIN)
        if read_fd is not None:
            poller.register(read_fd, select.POLLIN)
        if write_fd is not None:
            poller.register(write_fd, select.POLLOUT)
        events = poller.poll(timeout)
        if not events:
            raise TimeoutError(f"nothing moved for {idle} s")
        if any(fd == stop_fd for fd, _ in events):
            return


def _drive_natively(pump: _Pump, idle: float | None, stop_fd: int, drive: _NativeDrive) -> None:
    """``_drive`` by splice_pump.c, in one call that holds no GIL; ``pump`` is brought up to
    date from the C side's state whatever the outcome."""
    state = pump.native
    assert state is not None
    try:
        wait_ms = -1 if idle is None else math.ceil(idle * 1000)
        outcome = drive(ctypes.pointer(state), stop_fd, wait_ms)
    finally:
        pump.moved, pump.in_pipe, pump.ended = state.moved, state.in_pipe, bool(state.ended)
    if outcome == 2:
        raise TimeoutError(f"nothing moved for {idle} s")
    if outcome < 0:
        raise OSError(-outcome, os.strerror(-outcome))


async def _in_thread(pump: _Pump, idle: float | None) -> bool:
    """Drive ``pump`` to its end in a thread of its own; False (nothing done) when no thread
    could be started. Re-raises the thread's error; on cancellation stops the thread first."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    failure: list[BaseException] = []
    stop_read, stop_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def settle() -> None:
        if not finished.done():
            finished.set_result(None)

    drive = native_drive()
    if drive is not None:
        pump.native = _State(
            pump.src_fd, pump.dst_fd, pump.read_end, pump.write_end, pump.capacity,
            -1 if pump.limit is None else pump.limit, pump.moved, pump.in_pipe, pump.ended, 0,
        )  # fmt: skip

    def run() -> None:
        try:
            if drive is not None:
                _drive_natively(pump, idle, stop_read, drive)
            else:
                _drive(pump, idle, stop_read)
        except BaseException as exc:  # handed to the coroutine, which raises it
            failure.append(exc)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle)

    thread = threading.Thread(target=run, name="corral-splice", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # out of threads: the loop goes on with it
        os.close(stop_read)
        os.close(stop_write)
        return False
    cancelled = False
    try:
        while not finished.done():
            try:
                await asyncio.shield(finished)
            except asyncio.CancelledError:
                cancelled = True
                pump.stop()
                with contextlib.suppress(BlockingIOError):
                    os.write(stop_write, b"\0")
    finally:
        if finished.done():
            os.close(stop_read)
            os.close(stop_write)
    thread.join()  # it has settled ``finished`` and only returns: a moment, not a wait
    if cancelled:
        raise asyncio.CancelledError
    if failure:
        raise failure[0]
    return True


async def copy(
    src: socket.socket, dst: socket.socket, limit: int | None = None, *, idle: float | None = None
) -> int:
    """Move ``limit`` bytes (None: until the end of ``src``) from ``src`` to ``dst``; returns how
    many were moved. TimeoutError when nothing moves for ``idle`` seconds."""
    loop = asyncio.get_running_loop()
    pump = _Pump(src.fileno(), dst.fileno(), limit)
    on_loop = True
    try:
        yielded_at = 0
        while not pump.done:
            if not pump.move():
                await _wait(loop, *pump.waits_for(), idle)
                continue
            if on_loop and pump.moved >= THREAD_AFTER and not pump.done:
                if await _in_thread(pump, idle):
                    break
                on_loop = False
            if pump.moved - yielded_at >= YIELD_EVERY:
                yielded_at = pump.moved
                await asyncio.sleep(0)
        return pump.moved
    finally:
        pump.close()
