"""E2B's control API (both generations: ``/sandboxes`` and ``/v2/sandboxes``) over corral.

Each route converts E2B's JSON to a service call and back. E2B's ``paused`` is corral's
``parked``; a killed, stopped or failed sandbox does not exist for E2B (404). Forks and
snapshots are in ``snapshots``, metrics in ``metrics``; network options are translated to
corral's egress policy by ``network``. Fields corral cannot honour (an MCP gateway, volumes,
workload identity, some network options) are refused with 400 and a message that says which,
never dropped.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from corral.e2b.errors import api_error, api_error_of
from corral.e2b.network import create_egress, network_info, update_egress
from corral.e2b.tokens import AccessTokens
from corral.service.access import Permission, Principal, acting_as, authorize, may
from corral.service.audit import current_note
from corral.service.auth import principal_of
from corral.service.errors import CorralError, InvalidRequest, NotFound
from corral.service.model import CreateRequest
from corral.service.records import SandboxRecord
from corral.service.workspace import Workspace

# What corral reports as its envd version: octet-stream uploads and stdin closing (>= 0.5.7)
# are served; file metadata (0.6.2) and watch options (0.6.3+) are not, so the SDK refuses them.
ENVD_VERSION = "0.5.7"
CLIENT_ID = "corral"
MAX_BODY = 1 << 20
E2B_STATE = {"running": "running", "parked": "paused"}
# E2B fields of a new sandbox that corral takes as they are, or ignores harmlessly.
KNOWN_CREATE_FIELDS = {
    "templateID",
    "timeout",
    "metadata",
    "envVars",
    "autoPause",
    "autoPauseMemory",
    "autoResume",
    "secure",
    "allow_internet_access",
    "network",
    "mcp",
    "volumeMounts",
    "iam",
}


def workspace_of(request: Request) -> Workspace:
    ws: Workspace = request.app.state.workspace
    return ws


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


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def visible(record: SandboxRecord) -> bool:
    return record.state in E2B_STATE and not record.pooled


def find(ws: Workspace, sandbox_id: str) -> SandboxRecord:
    record = ws.sandboxes.get(sandbox_id)
    if not visible(record):
        raise NotFound(f"sandbox {sandbox_id} not found (it is {record.state})")
    return record


def domain_of(request: Request) -> str:
    """The domain sandboxes live under (``{port}-{id}.{domain}``, the SDK's ``get_host``): the
    daemon's domain of host-name routes to ports with the port users reach it at
    (``CORRAL_PORTS_DOMAIN``, ``localhost`` on loopback), else the host the client used."""
    settings = workspace_of(request).settings
    domain: str | None = settings.inbound_domain
    if domain is None:
        return request.headers.get("host") or request.url.netloc
    authority = settings.base_url.partition("://")[2].split("/", 1)[0]
    _, colon, port = authority.rpartition(":")
    return f"{domain}:{port}" if colon and port.isdigit() else domain


def created_body(record: SandboxRecord, request: Request) -> dict[str, Any]:
    tokens = tokens_of(request)
    return {
        "templateID": record.template,
        "sandboxID": record.id,
        "alias": record.template,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": tokens.token(record.id),
        "trafficAccessToken": tokens.traffic_token(record.id),
        "domain": domain_of(request),
    }


def listed_body(record: SandboxRecord) -> dict[str, Any]:
    end = record.expires_at or (record.created_at + 100 * 365 * 86400)
    return {
        "templateID": record.template,
        "alias": record.template,
        "sandboxID": record.id,
        "clientID": CLIENT_ID,
        "startedAt": iso(record.created_at),
        "endAt": iso(end),
        "cpuCount": max(1, round(record.cpu)),
        "memoryMB": record.memory_mib,
        "diskSizeMB": record.disk_mib,
        "metadata": record.metadata,
        "state": E2B_STATE[record.state],
        "envdVersion": ENVD_VERSION,
    }


def detail_body(record: SandboxRecord, request: Request) -> dict[str, Any]:
    body = listed_body(record)
    body["envdAccessToken"] = tokens_of(request).token(record.id)
    body["domain"] = domain_of(request)
    internet, network = network_info(workspace_of(request).sandboxes.policy_of(record))
    body["allowInternetAccess"] = internet
    body["network"] = network
    return body


async def json_body(request: Request) -> dict[str, Any]:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:  # checked while reading: a huge body is never held
            raise InvalidRequest(f"request body over {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    return body


def str_map(body: dict[str, Any], key: str) -> dict[str, str]:
    value = body.get(key) or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidRequest(f"'{key}' must be an object of strings")
    return value


def positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidRequest(f"'{key}' must be a positive number of seconds")
    return value


def auto_resume(value: Any) -> bool:
    """E2B's ``autoResume``: ``{"enabled": bool}`` (older bodies: a bare bool)."""
    if isinstance(value, dict):
        value = value.get("enabled")
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest("'autoResume.enabled' must be true or false")
    return bool(value)


def create_request(body: dict[str, Any], default_mode: str) -> CreateRequest:
    unknown = sorted(set(body) - KNOWN_CREATE_FIELDS)
    if unknown:
        raise InvalidRequest(f"corral does not know the sandbox fields {unknown}")
    refused = []
    if body.get("mcp"):
        refused.append("mcp (E2B's MCP gateway; corral serves MCP itself: `corral mcp`)")
    if body.get("volumeMounts"):
        refused.append("volumeMounts (corral has no volumes yet)")
    if body.get("iam"):
        refused.append("iam (corral has no workload identity)")
    if refused:
        raise InvalidRequest("corral cannot honour " + "; ".join(refused))
    template = body.get("templateID")
    if not isinstance(template, str) or not template:
        raise InvalidRequest("'templateID' is required")
    egress = create_egress(body.get("allow_internet_access"), body.get("network"), default_mode)
    wanted = CreateRequest(
        template=template,
        env=str_map(body, "envVars"),
        metadata=str_map(body, "metadata"),
        ttl_seconds=positive_int(body, "timeout") or 300,
        on_timeout="park" if body.get("autoPause") else "kill",
        auto_wake=auto_resume(body.get("autoResume")),
    )
    if egress is not None:
        wanted.network, wanted.allow, wanted.deny = egress.mode, egress.allow, egress.deny
    return wanted


def is_snapshot(ws: Workspace, name: str) -> bool:
    try:
        ws.snapshots.get(name)
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
async def create_sandbox(request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        wanted = create_request(await json_body(request), ws.settings.allowed_network_modes[0])
        if is_snapshot(ws, wanted.template):
            # E2B starts a sandbox from a snapshot by giving its id as the template.
            record = await ws.snapshots.restore(wanted.template, wanted)
        else:
            record = await ws.creator.create(wanted)
        return JSONResponse(created_body(record, request), status_code=201)

    return await guarded(run)


def list_filter(request: Request) -> tuple[dict[str, str] | None, set[str]]:
    metadata: dict[str, str] = {}
    states: set[str] = set()
    for key, value in request.query_params.multi_items():
        if key == "metadata":
            metadata.update(parse_qsl(value, keep_blank_values=True))
        elif key == "state":
            states.update(s for s in value.split(",") if s)
    return metadata or None, states


MAX_PAGE = 1000


def filtered(request: Request, records: list[SandboxRecord]) -> list[SandboxRecord]:
    """Listing filters beyond metadata and state: ``template``, ``startedAfter``."""
    template = request.query_params.get("template")
    if template:
        records = [r for r in records if r.template == template]
    raw_after = request.query_params.get("startedAfter")
    if raw_after:
        try:
            after = datetime.fromisoformat(raw_after.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidRequest(f"'startedAfter' is not an ISO time: {raw_after!r}") from exc
        if after.tzinfo is None:
            after = after.replace(tzinfo=UTC)
        # Compared as shown (startedAt is the creation time at microsecond precision).
        records = [r for r in records if datetime.fromtimestamp(r.created_at, UTC) >= after]
    return records


def page_of(request: Request) -> tuple[int, int]:
    """(offset, size) of a listing page: ``nextToken`` is the offset corral handed out."""
    raw_token = request.query_params.get("nextToken") or "0"
    raw_limit = request.query_params.get("limit") or str(MAX_PAGE)
    if not raw_token.isdigit() or not raw_limit.isdigit() or int(raw_limit) < 1:
        raise InvalidRequest("'nextToken' must come from a listing and 'limit' be positive")
    return int(raw_token), min(int(raw_limit), MAX_PAGE)


@router.get("/sandboxes")
@router.get("/v2/sandboxes")
async def list_sandboxes(request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        metadata, states = list_filter(request)
        wanted = {"running", "paused"} if request.url.path.startswith("/v2") else {"running"}
        wanted = states or wanted
        records = [
            r
            for r in ws.sandboxes.list(metadata=metadata)
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
async def get_sandbox(sandbox_id: str, request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        find(ws, sandbox_id)
        record = await ws.sandboxes.refresh(sandbox_id)
        if not visible(record):
            raise NotFound(f"sandbox {sandbox_id} not found (it is {record.state})")
        body = detail_body(record, request)
        if not may_change(request):
            body.pop("envdAccessToken")
        return JSONResponse(body)

    return await guarded(run)


@router.delete("/sandboxes/{sandbox_id}", dependencies=WRITES)
async def kill_sandbox(sandbox_id: str, request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        find(ws, sandbox_id)
        await ws.sandboxes.kill(sandbox_id)
        return Response(status_code=204)

    return await guarded(run)


@router.post("/sandboxes/{sandbox_id}/timeout", dependencies=WRITES)
async def set_timeout(sandbox_id: str, request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        find(ws, sandbox_id)
        seconds = positive_int(await json_body(request), "timeout")
        if seconds is None:
            raise InvalidRequest("'timeout' is required")
        ws.sandboxes.set_timeout(sandbox_id, seconds)
        return Response(status_code=204)

    return await guarded(run)


@router.post("/sandboxes/{sandbox_id}/refreshes", dependencies=WRITES)
async def refresh_sandbox(sandbox_id: str, request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        find(ws, sandbox_id)
        seconds = positive_int(await json_body(request), "duration") or 60
        record = ws.sandboxes.get(sandbox_id)
        remaining = (record.expires_at or 0) - time.time()
        if seconds > remaining:
            ws.sandboxes.set_timeout(sandbox_id, seconds)
        return Response(status_code=204)

    return await guarded(run)


@router.post("/sandboxes/{sandbox_id}/pause", dependencies=WRITES)
async def pause_sandbox(sandbox_id: str, request: Request) -> Response:
    async def run() -> Response:
        ws = workspace_of(request)
        if find(ws, sandbox_id).state == "parked":
            return api_error(409, f"sandbox {sandbox_id} is already paused")
        await ws.lifecycle.park(sandbox_id)
        return Response(status_code=204)

    return await guarded(run)


async def wake_and_answer(request: Request, sandbox_id: str, *, resume_only: bool) -> Response:
    ws = workspace_of(request)
    record = find(ws, sandbox_id)
    seconds = positive_int(await json_body(request), "timeout")
    status = 200
    if record.state == "parked":
        record = await ws.lifecycle.wake(sandbox_id)
        status = 201
    elif resume_only:
        return api_error(409, f"sandbox {sandbox_id} is already running")
    if seconds is not None:
        record = ws.sandboxes.set_timeout(sandbox_id, seconds)
    return JSONResponse(created_body(record, request), status_code=status)


@router.post("/sandboxes/{sandbox_id}/connect", dependencies=WRITES)
@router.post("/v2/sandboxes/{sandbox_id}/connect", dependencies=WRITES)
async def connect_sandbox(sandbox_id: str, request: Request) -> Response:
    return await guarded(lambda: wake_and_answer(request, sandbox_id, resume_only=False))


@router.post("/sandboxes/{sandbox_id}/resume", dependencies=WRITES)
async def resume_sandbox(sandbox_id: str, request: Request) -> Response:
    return await guarded(lambda: wake_and_answer(request, sandbox_id, resume_only=True))


@router.put("/sandboxes/{sandbox_id}/network", dependencies=WRITES)
async def update_network(sandbox_id: str, request: Request) -> Response:
    """E2B's network update: replaces the egress rules, applied at once (live connections that
    the new rules refuse are cut)."""

    async def run() -> Response:
        ws = workspace_of(request)
        record = find(ws, sandbox_id)
        egress = update_egress(await json_body(request), ws.sandboxes.policy_of(record))
        await ws.sandboxes.set_network(
            sandbox_id, mode=egress.mode, allow=egress.allow, deny=egress.deny
        )
        return Response(status_code=204)

    return await guarded(run)
