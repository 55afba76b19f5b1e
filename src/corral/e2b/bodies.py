"""E2B's JSON for sandboxes, read and written: a create request's fields (what corral takes, what
it refuses with a message that says which), a listing's filters and pages, a sandbox as a listing
shows it, and the bounded read of a request body. ``rest`` adds what needs the daemon's state
(tokens, domain, policy) and serves the routes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request

from corral.e2b.network import create_egress
from corral.service.errors import InvalidRequest
from corral.service.model import CreateRequest, SandboxState
from corral.service.records import SandboxRecord

__all__ = [
    "CLIENT_ID",
    "E2B_STATE",
    "ENVD_VERSION",
    "create_request",
    "filtered",
    "iso",
    "json_body",
    "list_filter",
    "listed_body",
    "page_of",
    "positive_int",
]

# What corral reports as its envd version: octet-stream uploads and stdin closing (>= 0.5.7)
# are served; file metadata (0.6.2) and watch options (0.6.3+) are not, so the SDK refuses them.
ENVD_VERSION = "0.5.7"
CLIENT_ID = "corral"
MAX_BODY = 1 << 20
E2B_STATE: dict[str, str] = {SandboxState.RUNNING: "running", SandboxState.PARKED: "paused"}
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


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


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
