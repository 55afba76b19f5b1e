"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, Request

from corral.service.auth import hash_key
from corral.service.console_sessions import COOKIE_NAME, CSRF_HEADER
from corral.service.errors import InvalidRequest, Unauthorized
from corral.service.files import FileService
from corral.service.processes import ProcessService
from corral.service.records import ApiKeyRecord
from corral.service.sandboxes import SandboxService
from corral.service.workspace import Workspace


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


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def own_origin(request: Request) -> str:
    """The origin this request was addressed to (scheme and Host), as a browser writes it."""
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def console_session_key(request: Request) -> str | None:
    """The API key behind the request's console session cookie, if it has a live one.

    A cookie travels with any request the browser makes, so a call that changes something must
    also prove it comes from the console's own page: the session's CSRF token in the
    ``X-Corral-CSRF`` header (a cross-origin page cannot read it) and, when the browser sends
    one, an ``Origin`` equal to the daemon's own.
    """
    cookie = request.cookies.get(COOKIE_NAME)
    if not cookie:
        return None
    session = get_workspace(request).console_sessions.get(cookie)
    if session is None:
        raise Unauthorized("the console session has expired or was closed: log in again")
    if request.method not in SAFE_METHODS:
        origin = request.headers.get("origin")
        if origin is not None and origin != own_origin(request):
            raise Unauthorized(
                f"refused a cross-origin request from {origin!r} with the console's session",
                code="forbidden",
            )
        if not session.csrf_matches(request.headers.get(CSRF_HEADER)):
            raise Unauthorized(
                "a console request that changes something needs the session's CSRF token "
                "in the X-Corral-CSRF header",
                code="forbidden",
            )
    return session.api_key


def presented_key(request: Request) -> str | None:
    """The key a request presents: its ``Authorization: Bearer`` header, else the key behind
    its console session cookie (checked as ``console_session_key`` says)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    presented = token.strip() if scheme.lower() == "bearer" else None
    return presented or console_session_key(request)


def require_key(request: Request) -> ApiKeyRecord:
    presented = presented_key(request)
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


SandboxesDep = Annotated[SandboxService, Depends(_sandboxes)]
ProcessesDep = Annotated[ProcessService, Depends(_processes)]
FilesDep = Annotated[FileService, Depends(_files)]
PathDep = Annotated[str, Depends(sandbox_path)]
