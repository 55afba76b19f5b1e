"""Turn what callers hand us (bytes, str, file objects, iterators) into streamed byte chunks.

Uploads and stdin never need the whole payload in memory: file objects are read a chunk at a
time in a worker thread, so a blocking `read()` (a pipe, a slow disk) never stalls the loop.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import IO, Any, TypeAlias

import anyio.to_thread

__all__ = ["CHUNK_SIZE", "UploadData", "iter_chunks", "known_length"]

CHUNK_SIZE = 1024 * 1024

UploadData: TypeAlias = (
    bytes
    | bytearray
    | memoryview
    | str
    | IO[bytes]
    | IO[str]
    | Iterable[bytes | str]
    | AsyncIterable[bytes | str]
)


def _as_bytes(chunk: Any) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode()
    if isinstance(chunk, bytes | bytearray | memoryview):
        return bytes(chunk)
    raise TypeError(f"expected bytes or str chunks, got {type(chunk).__name__}")


_DONE = object()


async def iter_chunks(data: UploadData, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
    """Yield `data` as non-empty byte chunks of at most about `chunk_size` bytes."""
    if isinstance(data, str | bytes | bytearray | memoryview):
        whole = _as_bytes(data)
        for start in range(0, len(whole), chunk_size):
            yield whole[start : start + chunk_size]
    elif hasattr(data, "read"):
        reader: Any = data
        while True:
            chunk = await anyio.to_thread.run_sync(reader.read, chunk_size)
            if not chunk:
                return
            yield _as_bytes(chunk)
    elif isinstance(data, AsyncIterable):
        async for chunk in data:
            if chunk:
                yield _as_bytes(chunk)
    elif isinstance(data, Iterable):
        iterator: Iterator[Any] = iter(data)
        while True:
            chunk = await anyio.to_thread.run_sync(next, iterator, _DONE)
            if chunk is _DONE:
                return
            if chunk:
                yield _as_bytes(chunk)
    else:
        raise TypeError(
            f"cannot upload a {type(data).__name__}: pass bytes, str, a file or an iterator"
        )


def known_length(data: UploadData) -> int | None:
    """The payload's size when it can be known without reading it (bytes, or a regular file
    positioned at its start)."""
    if isinstance(data, str):
        return len(data.encode())
    if isinstance(data, bytes | bytearray | memoryview):
        return len(data)
    fileno = getattr(data, "fileno", None)
    if fileno is not None and hasattr(data, "tell") and "b" in getattr(data, "mode", "b"):
        try:
            st = os.fstat(fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            return st.st_size - int(data.tell())
        except (OSError, ValueError):
            return None
    return None
