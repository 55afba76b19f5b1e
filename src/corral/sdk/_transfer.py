"""Whole exported files (parked sandboxes, snapshots) between the daemon and local disk.

Both directions stream in chunks: an export of a 2 GiB memory image never sits in memory. A
download to a path is written next to it under a temporary name and renamed into place only when
the daemon's stream ended cleanly, so a broken transfer never leaves a file that looks whole.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.to_thread

from corral.sdk._content import iter_chunks, known_length
from corral.sdk._http import STREAM_TIMEOUT

if TYPE_CHECKING:
    from corral.sdk._http import HTTPSession

__all__ = ["Destination", "Source", "download", "upload"]

Destination: TypeAlias = str | os.PathLike[str] | IO[bytes]
Source: TypeAlias = str | os.PathLike[str] | IO[bytes]


async def download(session: HTTPSession, url_path: str, destination: Destination) -> int:
    """GET `url_path` into `destination` (a path or a binary file object); returns the bytes."""
    if not isinstance(destination, str | os.PathLike):
        return await _download_into(session, url_path, destination)
    target = Path(destination)
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        with open(partial, "wb") as out:
            written = await _download_into(session, url_path, out)
            await anyio.to_thread.run_sync(os.fsync, out.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written


async def _download_into(session: HTTPSession, url_path: str, out: IO[bytes]) -> int:
    written = 0
    async with session.stream("GET", url_path) as response:
        async for chunk in session.iter_bytes(response):
            await anyio.to_thread.run_sync(out.write, chunk)
            written += len(chunk)
    await anyio.to_thread.run_sync(out.flush)
    return written


async def upload(session: HTTPSession, url_path: str, source: Source) -> Any:
    """POST the file `source` (a path or a binary file object) as the raw body of `url_path`
    and return the decoded JSON answer."""
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as handle:
            return await _upload_from(session, url_path, handle)
    return await _upload_from(session, url_path, source)


async def _upload_from(session: HTTPSession, url_path: str, handle: IO[bytes]) -> Any:
    headers = {"Content-Type": "application/x-tar"}
    size = known_length(handle)
    if size is not None:  # else (a pipe) it goes chunked
        headers["Content-Length"] = str(size)
    return await session.json(
        "POST", url_path, content=iter_chunks(handle), headers=headers, timeout=STREAM_TIMEOUT
    )
