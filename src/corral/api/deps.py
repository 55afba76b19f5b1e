"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, Request

from corral.service.errors import InvalidRequest
from corral.service.files import FileService
from corral.service.processes import ProcessService
from corral.service.sandboxes import SandboxService
from corral.service.workspace import Workspace
from corral.storage import ApiKeyRecord


def get_workspace(request: Request) -> Workspace:
    workspace: Workspace = request.app.state.workspace
    return workspace


def require_key(request: Request) -> ApiKeyRecord:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = token.strip() if scheme.lower() == "bearer" else None
    return get_workspace(request).api_keys.verify(presented)


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


SandboxesDep = Annotated[SandboxService, Depends(_sandboxes)]
ProcessesDep = Annotated[ProcessService, Depends(_processes)]
FilesDep = Annotated[FileService, Depends(_files)]
PathDep = Annotated[str, Depends(sandbox_path)]
