"""The workspace's shared things: project services and brokered secrets (with their audit trail)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.sdk._exec_models import _Wire

__all__ = ["ProjectServiceInfo", "SecretAuditEntry", "SecretInfo"]


@dataclass(frozen=True, slots=True)
class ProjectServiceInfo(_Wire):
    """A project service: sandboxes in a project mode resolve `name` and reach `address`
    on `ports` (`corral service add`); with `sandbox_id`, a port of that sandbox."""

    name: str
    address: str
    ports: list[int] = field(default_factory=list)
    created_at: float = 0.0
    sandbox_id: str | None = None  # a port of this sandbox (`address` is then virtual)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ProjectServiceInfo:
        return cls(
            name=str(data["name"]),
            address=str(data["address"]),
            ports=[int(p) for p in data.get("ports") or []],
            created_at=float(data.get("created_at", 0.0)),
            sandbox_id=data.get("sandbox_id"),
        )


@dataclass(frozen=True, slots=True)
class SecretInfo(_Wire):
    """A brokered secret as the daemon lists it: never its value (`corral secret ls`)."""

    name: str
    preset: str
    hosts: list[str] = field(default_factory=list)
    header: str | None = None
    scheme: str | None = None
    query: bool = True
    body: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    last_used_at: float | None = None
    sandboxes: list[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SecretInfo:
        return cls(
            name=str(data["name"]),
            preset=str(data.get("preset", "")),
            hosts=[str(h) for h in data.get("hosts") or []],
            header=data.get("header"),
            scheme=data.get("scheme"),
            query=bool(data.get("query", True)),
            body=bool(data.get("body", False)),
            created_at=float(data.get("created_at", 0.0)),
            updated_at=float(data.get("updated_at", 0.0)),
            last_used_at=data.get("last_used_at"),
            sandboxes=[str(s) for s in data.get("sandboxes") or []],
        )


@dataclass(frozen=True, slots=True)
class SecretAuditEntry(_Wire):
    """One injection of a secret by the broker (`corral secret log`)."""

    at: float
    sandbox_id: str
    secret: str
    host: str
    method: str
    path: str

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SecretAuditEntry:
        return cls(
            at=float(data["at"]),
            sandbox_id=str(data["sandbox_id"]),
            secret=str(data["secret"]),
            host=str(data["host"]),
            method=str(data["method"]),
            path=str(data["path"]),
        )
