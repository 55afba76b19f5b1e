"""The fake daemon's file routes: an in-memory tree of files per sandbox."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from corral.sdk.testing._state import Failure, FakeState, Route

__all__ = ["FileRoutes"]


class FileRoutes(FakeState):
    """Files of each sandbox as a dict path -> bytes; directories are implied by paths."""

    def files_routes(self) -> list[Route]:
        sbx = r"/v1/sandboxes/([^/]+)"
        return [
            ("GET", sbx + r"/files/content", self._read),
            ("PUT", sbx + r"/files/content", self._write),
            ("GET", sbx + r"/files/stat", self._stat),
            ("GET", sbx + r"/files/list", self._listdir),
            ("POST", sbx + r"/files/mkdir", self._mkdir),
            ("POST", sbx + r"/files/move", self._move),
            ("DELETE", sbx + r"/files", self._remove),
        ]

    async def _read(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        data = self._files(sandbox_id).get(path)
        if data is None:
            raise Failure(404, "not_found", f"no file {path}")

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 4096):
                yield data[start : start + 4096]

        return httpx.Response(200, content=chunks())

    async def _write(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        self._files(sandbox_id)[path] = request.content
        return httpx.Response(200, json={"path": path, "size": len(request.content)})

    def _files(self, sandbox_id: str) -> dict[str, bytes]:
        self._sandbox(sandbox_id)
        return self.files[sandbox_id]

    def _entry(self, path: str, data: bytes | None) -> dict[str, Any]:
        kind, size, mode = ("dir", 4096, 0o755) if data is None else ("file", len(data), 0o644)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        return {"name": name, "path": path, "type": kind, "size": size, "mode": mode, "mtime": 0.0}

    async def _stat(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        files = self._files(sandbox_id)
        if path in files:
            return httpx.Response(200, json=self._entry(path, files[path]))
        if path == "/" or any(name.startswith(path.rstrip("/") + "/") for name in files):
            return httpx.Response(200, json=self._entry(path, None))
        raise Failure(404, "not_found", f"no file {path}")

    async def _listdir(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        prefix = request.url.params["path"].rstrip("/") + "/"
        entries = []
        children: set[str] = set()
        for name, data in sorted(self._files(sandbox_id).items()):
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                child = rest.split("/", 1)[0]
                if child in children:
                    continue
                children.add(child)
                is_file = "/" not in rest
                entries.append(self._entry(prefix + child, data if is_file else None))
        return httpx.Response(200, json={"entries": entries})

    async def _mkdir(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = json.loads(request.content)["path"]
        files = self._files(sandbox_id)
        marker = path.rstrip("/") + "/.keep"
        created = marker not in files
        files.setdefault(marker, b"")
        return httpx.Response(200, json={"created": created})

    async def _move(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        body = json.loads(request.content)
        files = self._files(sandbox_id)
        if body["src"] not in files:
            raise Failure(404, "not_found", f"no file {body['src']}")
        files[body["dst"]] = files.pop(body["src"])
        return httpx.Response(200, json=self._entry(body["dst"], files[body["dst"]]))

    async def _remove(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        files = self._files(sandbox_id)
        if files.pop(path, None) is None:
            raise Failure(404, "not_found", f"no file {path}")
        return httpx.Response(204)
