"""Wire bodies of the multi-user API: keys, the workspace policy, the audit log, events.

Part of the same contract as ``schemas.py`` (stable names; fields may be added, none removed).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["admin", "member", "viewer"]
Scope = Literal[
    "sandboxes",
    "templates",
    "snapshots",
    "workspace",
    "events",
    "keys",
    "audit",
    "metrics",
    "services",
    "secrets",
    "trust",
]


class Quotas(BaseModel):
    """Limits over the sandboxes a key owns; an absent field is unlimited."""

    model_config = ConfigDict(extra="forbid")

    running: int | None = Field(default=None, ge=0, description="sandboxes creating or running")
    cpu: float | None = Field(default=None, ge=0, description="vCPUs of running sandboxes")
    memory_mib: int | None = Field(default=None, ge=0, description="memory of running sandboxes")
    disk_mib: int | None = Field(default=None, ge=0, description="disk of live sandboxes")
    parked: int | None = Field(default=None, ge=0, description="parked sandboxes")


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    role: Role = "member"
    scopes: list[Scope] | None = Field(
        default=None, max_length=16, description="families of calls it may make (None: all)"
    )
    expires_in_seconds: int | None = Field(default=None, gt=0, le=100 * 365 * 86400)
    quotas: Quotas = Field(default_factory=Quotas)
    rate_limit: float | None = Field(
        default=None, gt=0, le=1e6, description="requests per second (None: the default)"
    )


class KeyInfo(BaseModel):
    """A key as listed: never the key itself."""

    name: str
    role: Role
    scopes: list[str] | None = None
    created_at: float
    created_by: str | None = None
    last_used_at: float | None = None
    expires_at: float | None = None
    quotas: Quotas = Field(default_factory=Quotas)
    rate_limit: float | None = None


class KeyCreated(KeyInfo):
    """A new key: ``key`` is shown this once and stored nowhere but in the caller's hands."""

    key: str


class KeyList(BaseModel):
    keys: list[KeyInfo]


class Usage(BaseModel):
    running: int
    cpu: float
    memory_mib: int
    disk_mib: int
    parked: int


class KeySelf(KeyInfo):
    """The calling key, with what its sandboxes hold now (against its quotas)."""

    usage: Usage


class Policy(BaseModel):
    max_cpu: float
    max_memory_mib: int
    max_disk_mib: int
    max_ttl_seconds: int
    default_ttl_seconds: int | None = None
    network_modes: list[str]
    member_rule_kinds: list[str]
    member_min_prefix: int
    templates: list[str] | None = None
    runtimes: list[str] | None = None
    max_forks: int


class PolicyUpdate(BaseModel):
    """Fields to change; a field given as null goes back to its default."""

    model_config = ConfigDict(extra="forbid")

    max_cpu: float | None = Field(default=None, gt=0)
    max_memory_mib: int | None = Field(default=None, gt=0)
    max_disk_mib: int | None = Field(default=None, gt=0)
    max_ttl_seconds: int | None = Field(default=None, gt=0)
    default_ttl_seconds: int | None = Field(default=None, gt=0)
    network_modes: list[str] | None = Field(default=None, max_length=8)
    member_rule_kinds: list[str] | None = Field(default=None, max_length=8)
    member_min_prefix: int | None = Field(default=None, ge=0, le=32)
    templates: list[str] | None = Field(default=None, max_length=64)
    runtimes: list[str] | None = Field(default=None, max_length=16)
    max_forks: int | None = Field(default=None, ge=1, le=64)


class AuditEntry(BaseModel):
    id: int
    at: float
    key_name: str | None = None
    action: str
    method: str
    path: str
    target: str | None = None
    status: int
    result: str
    source: str | None = None
    detail: str | None = None


class AuditList(BaseModel):
    entries: list[AuditEntry]


class TemplateShare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shared: bool = True
