"""The workspace's shared side: API keys, the workspace policy, the audit log and events.

`client.keys`, `client.policy`, `client.audit(...)` and `client.events()` (async iterator of
`Event`) on `AsyncClient`; `Client` has the same calls synchronously (generated into sync.py).
Keys, policy changes and the audit log need an admin key; every key may read the policy, ask
about itself (`client.keys.me()`) and follow the events it may see.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from corral.sdk._exec_models import _Wire
from corral.sdk._http import HTTPSession

__all__ = [
    "ApiKeyInfo",
    "AsyncKeys",
    "AsyncPolicy",
    "AuditEntry",
    "Event",
    "WorkspacePolicy",
]


@dataclass(frozen=True, slots=True)
class ApiKeyInfo(_Wire):
    """An API key as listed (never the key). `key` is set only in what `create` returns: it is
    shown that once. `usage` (from `me()`): what the key's sandboxes hold now."""

    name: str
    role: str
    scopes: list[str] | None = None
    created_at: float = 0.0
    created_by: str | None = None
    last_used_at: float | None = None
    expires_at: float | None = None
    quotas: dict[str, float] = field(default_factory=dict)
    rate_limit: float | None = None
    key: str | None = None
    usage: dict[str, float] | None = None

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ApiKeyInfo:
        quotas = {k: float(v) for k, v in (data.get("quotas") or {}).items() if v is not None}
        return cls(
            name=str(data["name"]),
            role=str(data["role"]),
            scopes=list(data["scopes"]) if data.get("scopes") is not None else None,
            created_at=float(data.get("created_at", 0.0)),
            created_by=data.get("created_by"),
            last_used_at=data.get("last_used_at"),
            expires_at=data.get("expires_at"),
            quotas=quotas,
            rate_limit=data.get("rate_limit"),
            key=data.get("key"),
            usage=dict(data["usage"]) if data.get("usage") else None,
        )


@dataclass(frozen=True, slots=True)
class WorkspacePolicy(_Wire):
    """The workspace policy (`corral policy show`): see docs/api.md for each field."""

    max_cpu: float
    max_memory_mib: int
    max_disk_mib: int
    max_ttl_seconds: int
    default_ttl_seconds: int | None
    network_modes: list[str]
    member_rule_kinds: list[str]
    member_min_prefix: int
    templates: list[str] | None
    runtimes: list[str] | None
    max_forks: int

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> WorkspacePolicy:
        values: dict[str, Any] = {name: data.get(name) for name in cls.__dataclass_fields__}
        return cls(**values)


@dataclass(frozen=True, slots=True)
class AuditEntry(_Wire):
    """One call in the audit log: who (`key_name`), what (`action`, `method`, `path`,
    `target`), the answer (`status`, `result`: `ok` or an error code), when, from where."""

    id: int
    at: float
    key_name: str | None
    action: str
    method: str
    path: str
    target: str | None
    status: int
    result: str
    source: str | None = None
    detail: str | None = None

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> AuditEntry:
        values: dict[str, Any] = {name: data.get(name) for name in cls.__dataclass_fields__}
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Event(_Wire):
    """A state change: `kind` is created, running, parked, woken, forked, killed, stopped,
    error, build (template build progress) or lagged (this reader lost `detail["lost"]`)."""

    id: int
    kind: str
    at: float
    sandbox_id: str | None = None
    template: str | None = None
    state: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Event:
        return cls(
            id=int(data.get("id", 0)),
            kind=str(data.get("kind", "")),
            at=float(data.get("at", 0.0)),
            sandbox_id=data.get("sandbox_id"),
            template=data.get("template"),
            state=data.get("state"),
            detail=dict(data.get("detail") or {}),
        )


class AsyncKeys:
    """`client.keys`: create, list and revoke API keys (admin), and `me()` (any key)."""

    def __init__(self, session: HTTPSession) -> None:
        self._session = session

    async def create(
        self,
        name: str,
        *,
        role: str = "member",
        scopes: Sequence[str] | None = None,
        expires_in: float | None = None,
        quotas: Mapping[str, float] | None = None,
        rate_limit: float | None = None,
    ) -> ApiKeyInfo:
        """A new key; its `key` is in the answer only (shown once, stored hashed)."""
        body: dict[str, Any] = {"name": name, "role": role, "quotas": dict(quotas or {})}
        if scopes is not None:
            body["scopes"] = list(scopes)
        if expires_in is not None:
            body["expires_in_seconds"] = int(expires_in)
        if rate_limit is not None:
            body["rate_limit"] = rate_limit
        return ApiKeyInfo.from_wire(await self._session.json("POST", "/v1/keys", json_body=body))

    async def list(self) -> list[ApiKeyInfo]:
        answer = await self._session.json("GET", "/v1/keys")
        return [ApiKeyInfo.from_wire(item) for item in answer.get("keys", [])]

    async def revoke(self, name: str) -> None:
        """Revoke key `name`: it is refused (401) from now on."""
        await self._session.request("DELETE", f"/v1/keys/{quote(name, safe='')}")

    async def me(self) -> ApiKeyInfo:
        """The key this client uses, with its quotas and what its sandboxes hold."""
        return ApiKeyInfo.from_wire(await self._session.json("GET", "/v1/keys/self"))


class AsyncPolicy:
    """`client.policy`: read the workspace policy (any key), change it (admin)."""

    def __init__(self, session: HTTPSession) -> None:
        self._session = session

    async def get(self) -> WorkspacePolicy:
        return WorkspacePolicy.from_wire(await self._session.json("GET", "/v1/policy"))

    async def set(self, **changes: Any) -> WorkspacePolicy:
        """Change the fields given (a field given as None goes back to its default)."""
        answer = await self._session.json("PATCH", "/v1/policy", json_body=changes)
        return WorkspacePolicy.from_wire(answer)


async def audit(
    session: HTTPSession,
    *,
    key: str | None = None,
    sandbox: str | None = None,
    since: float | None = None,
    limit: int = 1000,
) -> list[AuditEntry]:
    params: dict[str, Any] = {"limit": limit}
    for name, value in (("key", key), ("sandbox", sandbox), ("since", since)):
        if value is not None:
            params[name] = value
    answer = await session.json("GET", "/v1/audit", params=params)
    return [AuditEntry.from_wire(item) for item in answer.get("entries", [])]


async def events(session: HTTPSession) -> AsyncIterator[Event]:
    """Parse the daemon's server-sent events until the caller stops iterating."""
    async with session.stream("GET", "/v1/events") as response:
        kind = ""
        data: list[str] = []
        async for line in session.iter_lines(response):
            if line.startswith(":"):
                continue
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                payload = json.loads("\n".join(data))
                payload.setdefault("kind", kind)
                yield Event.from_wire(payload)
                kind, data = "", []
