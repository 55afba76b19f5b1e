"""E2B's control API (both generations: ``/sandboxes`` and ``/v2/sandboxes``) over corral.

Each route converts E2B's JSON to a service call and back. E2B's ``paused`` is corral's ``parked``;
a killed, stopped or failed sandbox does not exist for E2B (404). Forks and snapshots are in
``snapshots``, metrics in ``metrics``; network options are translated to corral's egress policy by
``network``; E2B's JSON bodies are read and written by ``bodies``. Fields corral cannot honour (an
MCP gateway, volumes, workload identity, some network options) are refused with 400 and a message
that says which, never dropped.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from corral.config import Settings
from corral.e2b.bodies import (
    CLIENT_ID,
    E2B_STATE,
    ENVD_VERSION,
    create_request,
    filtered,
    json_body,
    list_filter,
    listed_body,
    page_of,
    positive_int,
)
from corral.e2b.deps import (
    CreatorDep,
    LifecycleDep,
    SandboxesDep,
    SettingsDep,
    SnapshotsDep,
    workspace_of,
)
from corral.e2b.errors import api_error, api_error_of
from corral.e2b.network import network_info, update_egress
from corral.e2b.tokens import AccessTokens
from corral.service.access import Permission, Principal, acting_as, authorize, may
from corral.service.audit import current_note
from corral.service.auth import principal_of
from corral.service.errors import CorralError, InvalidRequest, NotFound
from corral.service.lifecycle import LifecycleService
from corral.service.model import SandboxState
from corral.service.records import SandboxRecord
from corral.service.sandboxes import SandboxService
from corral.service.snapshots.service import SnapshotService


def tokens_of(request: Request) -> AccessTokens:
    tokens: AccessTokens = request.app.state.e2b_tokens
    return tokens


async def require_api_key(request: Request) -> Principal:
    """A corral API key sent as E2B does (``X-API-KEY``) or as corral does (Bearer); the rest
    of the request acts as it (``service.access``: ownership, quotas and policy apply here as
    on corral's own API). Async so that it runs in the request's own task."""
    ws = workspace_of(request)
    presented = request.headers.get("x-api-key")
    if not presented:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        presented = token.strip() if scheme.lower() == "bearer" else None
    record = ws.api_keys.verify(presented)
    principal = principal_of(record)
    note = current_note()
    if note is not None:
        note.principal = principal
    ws.rate_limits.take(record)
    acting_as(principal)
    authorize(Permission("sandboxes", "read"), principal)
    request.state.e2b_key = principal
    return principal


def may_change(request: Request) -> bool:
    key: Principal | None = getattr(request.state, "e2b_key", None)
    return key is not None and may(key, Permission("sandboxes", "write"))


async def require_writer(request: Request) -> None:
    """Refuse a key that may not change sandboxes what changes them or opens them (their envd
    access token): a viewer, or a key without the ``sandboxes`` scope. Async: a plain ``def``
    dependency would run in a worker thread."""
    authorize(Permission("sandboxes", "write"), request.state.e2b_key)


WRITES = [Depends(require_writer)]


router = APIRouter(tags=["e2b"], dependencies=[Depends(require_api_key)], include_in_schema=False)


def visible(record: SandboxRecord) -> bool:
    return record.state in E2B_STATE and not record.pooled


def find(sandboxes: SandboxService, sandbox_id: str) -> SandboxRecord:
    record = sandboxes.get(sandbox_id)
    if not visible(record):
        raise NotFound(f"sandbox {sandbox_id} not found (it is {record.state})")
    return record


def domain_of(request: Request, settings: Settings) -> str:
    """The domain sandboxes live under (``{port}-{id}.{domain}``, the SDK's ``get_host``): the
    daemon's domain of host-name routes to ports with the port users reach it at
    (``CORRAL_PORTS_DOMAIN``, ``localhost`` on loopback), else the host the client used."""
    domain: str | None = settings.inbound_domain
    if domain is None:
        return request.headers.get("host") or request.url.netloc
    authority = settings.base_url.partition("://")[2].split("/", 1)[0]
    _, colon, port = authority.rpartition(":")
    return f"{domain}:{port}" if colon and port.isdigit() else domain


def created_body(record: SandboxRecord, request: Request, settings: Settings) -> dict[str, Any]:
    tokens = tokens_of(request)
    return {
        "templateID": record.template,
        "sandboxID": record.id,
        "alias": record.template,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": tokens.token(record.id),
        "trafficAccessToken": tokens.traffic_token(record.id),
        "domain": domain_of(request, settings),
    }


def detail_body(
    record: SandboxRecord, request: Request, settings: Settings, sandboxes: SandboxService
) -> dict[str, Any]:
    body = listed_body(record)
    body["envdAccessToken"] = tokens_of(request).token(record.id)
    body["domain"] = domain_of(request, settings)
    internet, network = network_info(sandboxes.policy_of(record))
    body["allowInternetAccess"] = internet
    body["network"] = network
    return body


def is_snapshot(snapshots: SnapshotService, name: str) -> bool:
    try:
        snapshots.get(name)
    except NotFound:
        return False
    return True


async def guarded(call: Any) -> Response:
    try:
        result: Response = await call()
        return result
    except CorralError as exc:
        return api_error_of(exc)


@router.post("/sandboxes", dependencies=WRITES)
@router.post("/v2/sandboxes", dependencies=WRITES)
async def create_sandbox(
    request: Request, settings: SettingsDep, snapshots: SnapshotsDep, creator: CreatorDep
) -> Response:
    async def run() -> Response:
        wanted = create_request(await json_body(request), settings.allowed_network_modes[0])
        if is_snapshot(snapshots, wanted.template):
            # E2B starts a sandbox from a snapshot by giving its id as the template.
            record = await snapshots.restore(wanted.template, wanted)
        else:
            record = await creator.create(wanted)
        return JSONResponse(created_body(record, request, settings), status_code=201)

    return await guarded(run)


@router.get("/sandboxes")
@router.get("/v2/sandboxes")
async def list_sandboxes(request: Request, sandboxes: SandboxesDep) -> Response:
    async def run() -> Response:
        metadata, states = list_filter(request)
        wanted = {"running", "paused"} if request.url.path.startswith("/v2") else {"running"}
        wanted = states or wanted
        records = [
            r
            for r in sandboxes.list(metadata=metadata)
            if visible(r) and E2B_STATE[r.state] in wanted
        ]
        records = filtered(request, records)
        records.sort(
            key=lambda r: (r.created_at, r.id), reverse=request.query_params.get("order") == "desc"
        )
        start, limit = page_of(request)
        page = records[start : start + limit]
        headers = {}
        if start + limit < len(records):
            headers["x-next-token"] = str(start + limit)
        return JSONResponse([listed_body(r) for r in page], headers=headers)

    return await guarded(run)


@router.get("/sandboxes/{sandbox_id}")
async def get_sandbox(
    sandbox_id: str, request: Request, settings: SettingsDep, sandboxes: SandboxesDep
) -> Response:
    async def run() -> Response:
        find(sandboxes, sandbox_id)
        record = await sandboxes.refresh(sandbox_id)
        if not visible(record):
            raise NotFound(f"sandbox {sandbox_id} not found (it is {record.state})")
        body = detail_body(record, request, settings, sandboxes)
        if not may_change(request):
            body.pop("envdAccessToken")
        return JSONResponse(body)

    return await guarded(run)


@router.delete("/sandboxes/{sandbox_id}", dependencies=WRITES)
async def kill_sandbox(sandbox_id: str, sandboxes: SandboxesDep) -> Response:
    async def run() -> Response:
        find(sandboxes, sandbox_id)
        await sandboxes.kill(sandbox_id)
        return Response(status_code=204)

    return await guarded(run)


@router.post("/sandboxes/{sandbox_id}/timeout", dependencies=WRITES)
async def set_timeout(sandbox_id: str, request: Request, sandboxes: SandboxesDep) -> Response:
    async def run() -> Response:
        find(sandboxes, sandbox_id)
        seconds = positive_int(await json_body(request), "timeout")
        if seconds is None:
            raise InvalidRequest("'timeout' is required")
        sandboxes.set_timeout(sandbox_id, seconds)
        return Response(status_code=204)

    return await guarded(run)


@router.post("/sandboxes/{sandbox_id}/refreshes", dependencies=WRITES)
async def refresh_sandbox(sandbox_id: str, request: Request, sandboxes: SandboxesDep) -> Response:
    async def run() -> Response:
        find(sandboxes, sandbox_id)
        seconds = positive_int(await json_body(request), "duration") or 60
        record = sandboxes.get(sandbox_id)
        remaining = (record.expires_at or 0) - time.time()
        if seconds > remaining:
            sandboxes.set_timeout(sandbox_id, seconds)
        return Response(status_code=204)

    return await guarded(run)


@router.post("/sandboxes/{sandbox_id}/pause", dependencies=WRITES)
async def pause_sandbox(
    sandbox_id: str, sandboxes: SandboxesDep, lifecycle: LifecycleDep
) -> Response:
    async def run() -> Response:
        if find(sandboxes, sandbox_id).state == SandboxState.PARKED:
            return api_error(409, f"sandbox {sandbox_id} is already paused")
        await lifecycle.park(sandbox_id)
        return Response(status_code=204)

    return await guarded(run)


async def wake_and_answer(
    request: Request,
    sandbox_id: str,
    settings: Settings,
    sandboxes: SandboxService,
    lifecycle: LifecycleService,
    *,
    resume_only: bool,
) -> Response:
    record = find(sandboxes, sandbox_id)
    seconds = positive_int(await json_body(request), "timeout")
    status = 200
    if record.state == SandboxState.PARKED:
        record = await lifecycle.wake(sandbox_id)
        status = 201
    elif resume_only:
        return api_error(409, f"sandbox {sandbox_id} is already running")
    if seconds is not None:
        record = sandboxes.set_timeout(sandbox_id, seconds)
    return JSONResponse(created_body(record, request, settings), status_code=status)


@router.post("/sandboxes/{sandbox_id}/connect", dependencies=WRITES)
@router.post("/v2/sandboxes/{sandbox_id}/connect", dependencies=WRITES)
async def connect_sandbox(
    sandbox_id: str,
    request: Request,
    settings: SettingsDep,
    sandboxes: SandboxesDep,
    lifecycle: LifecycleDep,
) -> Response:
    return await guarded(
        lambda: wake_and_answer(
            request, sandbox_id, settings, sandboxes, lifecycle, resume_only=False
        )
    )


@router.post("/sandboxes/{sandbox_id}/resume", dependencies=WRITES)
async def resume_sandbox(
    sandbox_id: str,
    request: Request,
    settings: SettingsDep,
    sandboxes: SandboxesDep,
    lifecycle: LifecycleDep,
) -> Response:
    return await guarded(
        lambda: wake_and_answer(
            request, sandbox_id, settings, sandboxes, lifecycle, resume_only=True
        )
    )


@router.put("/sandboxes/{sandbox_id}/network", dependencies=WRITES)
async def update_network(sandbox_id: str, request: Request, sandboxes: SandboxesDep) -> Response:
    """E2B's network update: replaces the egress rules, applied at once (live connections that
    the new rules refuse are cut)."""

    async def run() -> Response:
        record = find(sandboxes, sandbox_id)
        egress = update_egress(await json_body(request), sandboxes.policy_of(record))
        await sandboxes.set_network(
            sandbox_id, mode=egress.mode, allow=egress.allow, deny=egress.deny
        )
        return Response(status_code=204)

    return await guarded(run)
