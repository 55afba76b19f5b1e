"""A sandbox's filesystem: streamed upload and download, listing, stat, mkdir, move, remove.

Paths are paths inside the sandbox. Uploads and downloads stream in chunks, so a 1 GiB file
goes through without being held in memory.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from corral.sdk._content import UploadData, iter_chunks, known_length
from corral.sdk._http import STREAM_TIMEOUT
from corral.sdk.errors import NotFound
from corral.sdk.models import FileInfo, WriteResult

if TYPE_CHECKING:
    from corral.sdk.sandbox import AsyncSandbox

__all__ = ["AsyncFiles"]


class AsyncFiles:
    """`sandbox.files`: the filesystem of one sandbox."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    @property
    def _path(self) -> str:
        return f"{self._sandbox.path}/files"

    async def write(
        self, path: str, data: UploadData, *, mode: int | None = None, parents: bool = True
    ) -> WriteResult:
        """Create or replace the file at `path` with `data` (bytes, str, a binary file object,
        or an iterator of chunks), creating missing parent directories unless `parents=False`.
        `mode` is the permission bits, e.g. `0o755`."""
        params: dict[str, str | int] = {"path": path, "parents": "true" if parents else "false"}
        if mode is not None:
            params["mode"] = mode
        headers = {"Content-Type": "application/octet-stream"}
        length = known_length(data)
        if isinstance(data, bytes | bytearray | memoryview | str):
            content: object = data.encode() if isinstance(data, str) else bytes(data)
        else:
            content = iter_chunks(data)
            if length is not None:
                headers["Content-Length"] = str(length)
        answer = await self._sandbox.session.json(
            "PUT",
            f"{self._path}/content",
            params=params,
            content=content,
            headers=headers,
            timeout=STREAM_TIMEOUT,
        )
        return WriteResult.from_wire(answer or {"path": path, "size": length or 0})

    async def stream(self, path: str) -> AsyncIterator[bytes]:
        """The file's content as chunks, as they arrive."""
        session = self._sandbox.session
        async with session.stream("GET", f"{self._path}/content", params={"path": path}) as resp:
            async for chunk in session.iter_bytes(resp):
                yield chunk

    async def read(self, path: str) -> bytes:
        """The whole file, in memory (use `stream` or `download` for big files)."""
        chunks = [chunk async for chunk in self.stream(path)]
        return b"".join(chunks)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def download(self, path: str, local_path: str | Path) -> int:
        """Copy the sandbox file `path` to `local_path`, streamed; returns the bytes written."""
        written = 0
        target = anyio.Path(local_path)
        async with await target.open("wb") as out:
            async for chunk in self.stream(path):
                await out.write(chunk)
                written += len(chunk)
        return written

    async def upload(
        self, local_path: str | Path, path: str, *, mode: int | None = None
    ) -> WriteResult:
        """Copy the local file `local_path` to `path` in the sandbox, streamed."""
        with open(local_path, "rb") as source:  # reads run in a worker thread
            return await self.write(path, source, mode=mode)

    async def list(self, path: str = "/", depth: int = 1) -> builtins.list[FileInfo]:
        answer = await self._sandbox.session.json(
            "GET", f"{self._path}/list", params={"path": path, "depth": depth}
        )
        return [FileInfo.from_wire(entry) for entry in answer.get("entries", [])]

    async def stat(self, path: str) -> FileInfo:
        answer = await self._sandbox.session.json(
            "GET", f"{self._path}/stat", params={"path": path}
        )
        return FileInfo.from_wire(answer)

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFound:
            return False
        return True

    async def mkdir(self, path: str, parents: bool = True) -> bool:
        """Make a directory; returns False when it already existed."""
        answer = await self._sandbox.session.json(
            "POST", f"{self._path}/mkdir", json_body={"path": path, "parents": parents}
        )
        return bool((answer or {}).get("created", True))

    async def move(self, src: str, dst: str) -> FileInfo:
        answer = await self._sandbox.session.json(
            "POST", f"{self._path}/move", json_body={"src": src, "dst": dst}
        )
        return FileInfo.from_wire(answer)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._sandbox.session.request(
            "DELETE",
            self._path,
            params={"path": path, "recursive": "true" if recursive else "false"},
        )
