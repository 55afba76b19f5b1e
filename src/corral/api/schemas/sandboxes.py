"""Sandboxes on the wire: create, the sandbox itself, its network policy and project services,
capacity and usage, forks, ports and metrics.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.api.schemas.base import NetworkModeName, SandboxState

__all__ = [
    "Capacity",
    "ForkRequest",
    "NetworkChanged",
    "NetworkPolicy",
    "NetworkUpdate",
    "Port",
    "PortList",
    "PortOpen",
    "ProjectService",
    "ProjectServiceCreate",
    "ProjectServiceList",
    "ResourceUsage",
    "Sandbox",
    "SandboxCreate",
    "SandboxList",
    "SandboxMetricsSample",
    "SecretFile",
]


class SecretFile(BaseModel):
    """A file written into a new sandbox holding a brokered secret's placeholder."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64, description="the secret (one of ``secrets``)")
    path: str = Field(max_length=4096, description="absolute path in the sandbox")
    template: str | None = Field(
        default=None,
        max_length=65536,
        description="the file's text with $NAME or ${NAME} for placeholders (default: the "
        "preset's template for that file, else the placeholder alone)",
    )


class SandboxCreate(BaseModel):
    """A request for a new sandbox; omitted resources take the template's defaults."""

    model_config = ConfigDict(extra="forbid")

    template: str = "base"
    cpu: float | None = Field(default=None, gt=0, description="vCPUs")
    memory_mib: int | None = Field(default=None, gt=0)
    disk_mib: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    ttl_seconds: int | None = Field(default=None, gt=0, description="end after this many seconds")
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        description="env values that are secret: never stored or shown; the sandbox becomes "
        "secret-bearing (no fork, export or memory snapshot)",
    )
    on_timeout: Literal["kill", "park"] = "kill"
    auto_park_idle: int | None = Field(
        default=None, gt=0, description="park after this many seconds without exec or file calls"
    )
    auto_wake: bool = Field(default=False, description="wake on an exec or file call when parked")
    snapshot: str | None = Field(default=None, description="restore from this snapshot")
    network: NetworkModeName | None = Field(
        default=None, description="egress mode (default: the workspace's first allowed mode)"
    )
    allow: list[str] = Field(default_factory=list, max_length=256, description="egress rules")
    deny: list[str] = Field(default_factory=list, max_length=256, description="egress rules")
    secrets: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="brokered secrets (docs/secrets.md): the sandbox's env holds placeholders, "
        "the broker puts the values into requests to the secrets' hosts",
    )
    secret_files: list[SecretFile] = Field(default_factory=list, max_length=32)


class NetworkPolicy(BaseModel):
    """A sandbox's egress policy (docs/network.md): a mode, allow and deny rules (deny wins)."""

    mode: NetworkModeName
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)


class NetworkUpdate(BaseModel):
    """A live change: each field given replaces that part of the policy; omitted ones stay."""

    model_config = ConfigDict(extra="forbid")

    mode: NetworkModeName | None = None
    allow: list[str] | None = Field(default=None, max_length=256)
    deny: list[str] | None = Field(default=None, max_length=256)


class NetworkChanged(BaseModel):
    sandbox_id: str
    network: NetworkPolicy
    connections_cut: int = Field(description="open connections the new policy ended")


class ProjectService(BaseModel):
    """A name every sandbox in a project mode resolves, and the port it reaches there."""

    name: str
    address: str
    ports: list[int]
    created_at: float
    sandbox_id: str | None = Field(
        default=None, description="a port of this sandbox; `address` is then virtual"
    )


class ProjectServiceCreate(BaseModel):
    """Either ``target`` (an address the daemon reaches) or ``sandbox_id`` and ``port``."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(
        default=None, max_length=64, description="IPV4:PORT", examples=["10.1.2.3:5432"]
    )
    sandbox_id: str | None = Field(default=None, max_length=64)
    port: int | None = Field(default=None, ge=1, le=65535)


class ProjectServiceList(BaseModel):
    services: list[ProjectService]


class Sandbox(BaseModel):
    """A sandbox as the daemon records it."""

    id: str
    state: SandboxState
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str]
    metadata: dict[str, str]
    created_at: float
    expires_at: float | None
    error: str | None = None
    secret_env_keys: list[str] = Field(default_factory=list)
    brokered_secrets: list[str] = Field(
        default_factory=list,
        description="brokered secrets bound to it (in answers about one sandbox; not in lists)",
    )
    on_timeout: str = "kill"
    auto_park_idle: int | None = None
    auto_wake: bool = False
    parent_id: str | None = None
    owner: str | None = Field(
        default=None, description="the name of the key that made it (in listings and gets)"
    )
    image_mib: int = Field(default=0, description="disk taken by its parked memory image")
    pooled: bool = Field(default=False, description="waiting in its template's ready pool")
    frozen: bool = Field(
        default=False,
        description="running, but frozen for idleness: it costs no CPU, and the next call thaws "
        "it first (in answers about one sandbox; lists leave it false)",
    )
    network: NetworkPolicy | None = None
    # Filled in by GET /v1/sandboxes/{id} only (a list leaves them empty).
    ports: list[Port] = Field(default_factory=list, description="its open inbound ports")
    names: list[str] = Field(
        default_factory=list, description="the project services' names it resolves"
    )
    serves_as: list[str] = Field(
        default_factory=list, description="project services that are ports of this sandbox"
    )


class SandboxList(BaseModel):
    sandboxes: list[Sandbox]


class ResourceUsage(BaseModel):
    total: float
    reserved: float
    free: float


class Capacity(BaseModel):
    """Workspace capacity: cpu in vCPUs (after overcommit), memory and disk in MiB."""

    cpu: ResourceUsage
    memory: ResourceUsage
    disk: ResourceUsage
    cpu_overcommit: int


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(default=1, ge=1, le=64)


class PortOpen(BaseModel):
    """Open a sandbox's port to inbound HTTP and WebSocket traffic through the daemon."""

    model_config = ConfigDict(extra="forbid")

    port: int = Field(ge=1, le=65535)
    public: bool = Field(default=False, description="reachable without the access token")


class Port(BaseModel):
    """An open port: ``url`` reaches it (the host-name route when the daemon has a domain for
    them, else the path route); ``token`` is needed unless ``public``."""

    sandbox_id: str
    port: int
    public: bool
    url: str
    path_url: str
    host_url: str | None
    token: str | None
    created_at: float


class PortList(BaseModel):
    ports: list[Port]


class SandboxMetricsSample(BaseModel):
    sandbox_id: str
    timestamp: float = Field(description="Unix time of the sample")
    cpu_count: float
    cpu_used_pct: float = Field(description="percent of its cpu allowance since the last sample")
    mem_used: int = Field(description="bytes")
    mem_total: int = Field(description="bytes")
    mem_cache: int = Field(description="bytes of file cache")
    disk_used: int = Field(description="bytes")
    disk_total: int = Field(description="bytes")
    net_rx_bytes: int = Field(0, description="bytes received since creation (over park/wake)")
    net_rx_packets: int = Field(0, description="packets received since creation")
    net_tx_bytes: int = Field(0, description="bytes sent since creation (over park/wake)")
    net_tx_packets: int = Field(0, description="packets sent since creation")
