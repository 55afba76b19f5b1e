"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, Request

from corral.service.auth import hash_key
from corral.service.code import CodeService
from corral.service.errors import InvalidRequest
from corral.service.files import FileService
from corral.service.processes import ProcessService
from corral.service.sandboxes import SandboxService
from corral.service.workspace import Workspace
from corral.storage import ApiKeyRecord


def get_workspace(request: Request) -> Workspace:
    workspace: Workspace = request.app.state.workspace
    return workspace


class VerifiedKeys:
    """Keys verified against the store in the last ``ttl`` seconds, by SHA-256 of the key.

    Saves a store query on every request (an exec round trip is a few milliseconds). Only
    successful verifications are kept, and only for ``ttl``: a key removed from the store stops
    working within that time. Event-loop only (no locking).
    """

    def __init__(self, ttl: float = 2.0) -> None:
        self.ttl = ttl
        self._until: dict[str, tuple[float, ApiKeyRecord]] = {}

    def get(self, digest: str) -> ApiKeyRecord | None:
        found = self._until.get(digest)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def put(self, digest: str, record: ApiKeyRecord) -> None:
        if len(self._until) > 1024:  # bounded: forget everything rather than track ages
            self._until.clear()
        self._until[digest] = (time.monotonic() + self.ttl, record)


def require_key(request: Request) -> ApiKeyRecord:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = token.strip() if scheme.lower() == "bearer" else None
    cache: VerifiedKeys | None = getattr(request.app.state, "verified_keys", None)
    if not presented or cache is None:
        return get_workspace(request).api_keys.verify(presented)
    digest = hash_key(presented)
    record = cache.get(digest)
    if record is None:
        record = get_workspace(request).api_keys.verify(presented)
        cache.put(digest, record)
    return record


def sandbox_path(request: Request) -> str:
    """The ``path`` query parameter, keeping bytes that are not UTF-8 (surrogateescape)."""
    query = request.scope.get("query_string", b"").decode("latin-1")
    for key, value in parse_qsl(query, keep_blank_values=True, errors="surrogateescape"):
        if key == "path":
            return value
    raise InvalidRequest("query parameter 'path' is required")


WorkspaceDep = Annotated[Workspace, Depends(get_workspace)]


def _sandboxes(ws: WorkspaceDep) -> SandboxService:
    return ws.sandboxes


def _processes(ws: WorkspaceDep) -> ProcessService:
    return ws.processes


def _files(ws: WorkspaceDep) -> FileService:
    return ws.files


def _code(ws: WorkspaceDep) -> CodeService:
    return ws.code


SandboxesDep = Annotated[SandboxService, Depends(_sandboxes)]
ProcessesDep = Annotated[ProcessService, Depends(_processes)]
FilesDep = Annotated[FileService, Depends(_files)]
CodeDep = Annotated[CodeService, Depends(_code)]
PathDep = Annotated[str, Depends(sandbox_path)]
