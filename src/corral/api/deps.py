"""Dependencies shared by the routes, as ``Annotated`` aliases: the caller's key and
permission, the ``path`` parameter, and one typed dependency per service (``SandboxesDep``,
``LifecycleDep``, ...), so that a route takes exactly the services it calls.

Every dependency is ``async def``, even where it awaits nothing: FastAPI runs a plain ``def``
dependency in a worker thread (a thread-pool round trip per dependency per request, ~0.2 ms of
the daemon's CPU each on the exec path), where an ``async def`` one is a plain call on the loop.
None of them blocks: they read the app's state, headers and the store's small records.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, Request

from corral.api.permissions import permission_of
from corral.service.access import Principal, acting_as, authorize
from corral.service.audit import AuditLog, current_note
from corral.service.auth import ApiKeys, principal_of
from corral.service.builds import BuildService
from corral.service.code import CodeService
from corral.service.console_sessions import COOKIE_NAME, CSRF_HEADER, ConsoleSessions
from corral.service.create import SandboxCreator
from corral.service.errors import InvalidRequest, Unauthorized
from corral.service.events import EventBus
from corral.service.files import FileService
from corral.service.lifecycle import LifecycleService
from corral.service.metrics import MetricsService
from corral.service.policy import PolicyService
from corral.service.pools import PoolService
from corral.service.ports import PortService
from corral.service.processes import ProcessService
from corral.service.project_services import ProjectServices
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.secrets import SecretService
from corral.service.snapshots.service import SnapshotService
from corral.service.snapshots.transfer import TransferService
from corral.service.snapshots.trust import TrustService
from corral.service.templates import TemplateService
from corral.service.workspace import Workspace


def get_workspace(request: Request) -> Workspace:
    workspace: Workspace = request.app.state.workspace
    return workspace


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
    """The key a request presents: its ``Authorization: Bearer`` header (or, as the E2B SDK
    sends it, ``X-API-KEY``), else the key behind its console session cookie (checked as
    ``console_session_key`` says)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or console_session_key(request)


async def require_key(request: Request) -> Principal:
    """Verify the request's API key, spend one of its rate-limit tokens, and act as it for the
    rest of the request (``service.access``). Async on purpose: it runs in the request's own
    task, so the principal it sets is the one the route and the services see."""
    ws = get_workspace(request)
    note = current_note()
    record = ws.api_keys.verify(presented_key(request))
    principal = principal_of(record)
    if note is not None:
        note.principal = principal
    ws.rate_limits.take(record)
    acting_as(principal)
    request.state.principal = principal
    return principal


async def authorize_route(
    request: Request, principal: Annotated[Principal, Depends(require_key)]
) -> Principal:
    """The route's permission (``api/permissions.py``) for the acting key; fails closed for a
    route that has none."""
    route = request.scope.get("route")
    operation = getattr(route, "operation_id", None) or getattr(route, "name", "")
    authorize(permission_of(str(operation)), principal)
    sandbox_id = request.path_params.get("sandbox_id")
    if sandbox_id is not None and not principal.sees_everything:
        # Before the body is even read: another member's sandbox answers 404 for every call,
        # exactly as a missing one, whatever else is wrong with the request.
        get_workspace(request).sandboxes.get(sandbox_id)
    return principal


async def sandbox_path(request: Request) -> str:
    """The ``path`` query parameter, keeping bytes that are not UTF-8 (surrogateescape)."""
    raw: bytes = request.scope.get("query_string", b"")
    query = raw.decode("latin-1")
    for key, value in parse_qsl(query, keep_blank_values=True, errors="surrogateescape"):
        if key == "path":
            return value
    raise InvalidRequest("query parameter 'path' is required")


async def _presented_key(request: Request) -> str | None:
    return presented_key(request)


PresentedKeyDep = Annotated[str | None, Depends(_presented_key)]
PrincipalDep = Annotated[Principal, Depends(authorize_route)]
PathDep = Annotated[str, Depends(sandbox_path)]


# One dependency per service: a route names the services it calls, and nothing else of the
# workspace. Each reads one attribute of the app's workspace (no dependency chain, no thread).


async def _api_keys(request: Request) -> ApiKeys:
    return get_workspace(request).api_keys


async def _audit(request: Request) -> AuditLog:
    return get_workspace(request).audit


async def _admission(request: Request) -> Admission:
    return get_workspace(request).admission


async def _builds(request: Request) -> BuildService:
    return get_workspace(request).builds


async def _code(request: Request) -> CodeService:
    return get_workspace(request).code


async def _console_sessions(request: Request) -> ConsoleSessions:
    return get_workspace(request).console_sessions


async def _creator(request: Request) -> SandboxCreator:
    return get_workspace(request).creator


async def _events(request: Request) -> EventBus:
    return get_workspace(request).events


async def _files(request: Request) -> FileService:
    return get_workspace(request).files


async def _lifecycle(request: Request) -> LifecycleService:
    return get_workspace(request).lifecycle


async def _metrics(request: Request) -> MetricsService:
    return get_workspace(request).metrics


async def _policy(request: Request) -> PolicyService:
    return get_workspace(request).policy


async def _pools(request: Request) -> PoolService:
    return get_workspace(request).pools


async def _ports(request: Request) -> PortService:
    return get_workspace(request).ports


async def _processes(request: Request) -> ProcessService:
    return get_workspace(request).processes


async def _project_services(request: Request) -> ProjectServices:
    return get_workspace(request).services


async def _sandboxes(request: Request) -> SandboxService:
    return get_workspace(request).sandboxes


async def _secrets(request: Request) -> SecretService:
    return get_workspace(request).secrets


async def _snapshots(request: Request) -> SnapshotService:
    return get_workspace(request).snapshots


async def _templates(request: Request) -> TemplateService:
    return get_workspace(request).templates


async def _transfer(request: Request) -> TransferService:
    return get_workspace(request).transfer


async def _trust(request: Request) -> TrustService:
    return get_workspace(request).trust


ApiKeysDep = Annotated[ApiKeys, Depends(_api_keys)]
AuditDep = Annotated[AuditLog, Depends(_audit)]
AdmissionDep = Annotated[Admission, Depends(_admission)]
BuildsDep = Annotated[BuildService, Depends(_builds)]
CodeDep = Annotated[CodeService, Depends(_code)]
ConsoleSessionsDep = Annotated[ConsoleSessions, Depends(_console_sessions)]
CreatorDep = Annotated[SandboxCreator, Depends(_creator)]
EventsDep = Annotated[EventBus, Depends(_events)]
FilesDep = Annotated[FileService, Depends(_files)]
LifecycleDep = Annotated[LifecycleService, Depends(_lifecycle)]
MetricsDep = Annotated[MetricsService, Depends(_metrics)]
PolicyDep = Annotated[PolicyService, Depends(_policy)]
PoolsDep = Annotated[PoolService, Depends(_pools)]
PortsDep = Annotated[PortService, Depends(_ports)]
ProcessesDep = Annotated[ProcessService, Depends(_processes)]
ProjectServicesDep = Annotated[ProjectServices, Depends(_project_services)]
SandboxesDep = Annotated[SandboxService, Depends(_sandboxes)]
SecretsDep = Annotated[SecretService, Depends(_secrets)]
SnapshotsDep = Annotated[SnapshotService, Depends(_snapshots)]
TemplatesDep = Annotated[TemplateService, Depends(_templates)]
TransferDep = Annotated[TransferService, Depends(_transfer)]
TrustDep = Annotated[TrustService, Depends(_trust)]
