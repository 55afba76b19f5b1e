"""Early writeback of a file tree while it is being written (a checkpoint image about to be made
durable): every ``interval`` a thread starts the writeback of the dirty pages of every regular
file below the directory (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which waits for nothing),
so that the fsync made once the tree is complete waits only for what was written last instead
of for the whole image (about 150 ms for 200 MB on this machine kind's disk).

Purely advisory: it changes what is on disk at no point a reader could tell, never what any
file holds; failures (no such call, a file gone) are ignored; without ``sync_file_range`` it
does nothing. The fsync that makes the tree durable is still the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

__all__ = ["WRITEBACK_INTERVAL", "writing_back"]

WRITEBACK_INTERVAL = 0.02  # seconds between two passes over the tree
_SYNC_FILE_RANGE_WRITE = 2

SyncFileRange = Callable[[int, int, int, int], int]


def _load() -> SyncFileRange | None:
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_sync_file_range = _load()


def _kick(directory: Path, call: SyncFileRange) -> None:
    """Start the writeback of every regular file below ``directory`` (errors ignored)."""
    for dirpath, _dirnames, filenames in os.walk(directory):
        for name in filenames:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                call(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
            finally:
                os.close(fd)


def _loop(directory: Path, stop: threading.Event, interval: float, call: SyncFileRange) -> None:
    while not stop.wait(interval):
        _kick(directory, call)


@contextlib.asynccontextmanager
async def writing_back(
    directory: Path, interval: float = WRITEBACK_INTERVAL
) -> AsyncIterator[None]:
    """While the body writes files below ``directory``, start their writeback every
    ``interval`` from a thread of its own (stopped and joined when the body ends)."""
    call = _sync_file_range
    if call is None:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(
        target=_loop, args=(directory, stop, interval, call), name="writeback", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
