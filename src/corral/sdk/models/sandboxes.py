"""Sandboxes: what a new one may ask for, one as the daemon records it (its network and open ports),
its resource samples, and the workspace's capacity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from corral.sdk._exec_models import _Wire

__all__ = [
    "Capacity",
    "NetworkChange",
    "NetworkPolicy",
    "PortInfo",
    "ResourceUsage",
    "SandboxInfo",
    "SandboxMetrics",
    "SandboxOptions",
]


class SandboxOptions(TypedDict, total=False):
    """What a new sandbox may ask for besides its template (all optional).

    `snapshot` restores a saved state instead of starting the template fresh. `secret_env` values
    reach the sandbox but are never stored or shown, and make it secret-bearing (no fork, export
    or memory snapshot). `on_timeout` ("kill" or "park") says how `ttl_seconds` ends;
    `auto_park_idle` parks it after that many idle seconds; `auto_wake` wakes a parked sandbox on
    the next exec or file call. `secrets` names brokered secrets (`Client.set_secret`): the
    sandbox's env holds placeholders and the daemon's broker puts the values into requests to
    the secrets' hosts, so the sandbox stays free to fork, park and export; `secret_files` are
    `{"name", "path", "template"?}` files holding placeholders (docs/secrets.md).
    """

    cpu: float | None
    memory_mib: int | None
    disk_mib: int | None
    env: Mapping[str, str] | None
    metadata: Mapping[str, str] | None
    ttl_seconds: int | None
    snapshot: str | None
    secret_env: Mapping[str, str] | None
    on_timeout: str | None
    auto_park_idle: int | None
    auto_wake: bool
    network: str | None
    allow: Sequence[str] | None
    deny: Sequence[str] | None
    secrets: Sequence[str] | None
    secret_files: Sequence[Mapping[str, str | None]] | None


@dataclass(frozen=True, slots=True)
class NetworkPolicy(_Wire):
    """A sandbox's egress: `mode` (project_internet, internet, project, airgapped), then
    `allow` and `deny` rules (`CIDR[:PORT[-PORT]]`, `project[:PORT]`, a host name); a deny
    wins over every allow and over the mode (docs/network.md)."""

    mode: str
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> NetworkPolicy:
        return cls(
            mode=str(data.get("mode", "")),
            allow=[str(rule) for rule in data.get("allow") or []],
            deny=[str(rule) for rule in data.get("deny") or []],
        )


@dataclass(frozen=True, slots=True)
class NetworkChange(_Wire):
    """The policy a live change left, and how many open connections it cut."""

    network: NetworkPolicy
    connections_cut: int = 0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> NetworkChange:
        return cls(
            network=NetworkPolicy.from_wire(data.get("network") or {}),
            connections_cut=int(data.get("connections_cut") or 0),
        )


@dataclass(frozen=True, slots=True)
class PortInfo(_Wire):
    """An open port: `url` reaches it (`path_url` always works; `host_url` is the
    `PORT-ID.<domain>` form when the daemon has a domain); `token` unless `public`."""

    sandbox_id: str
    port: int
    public: bool
    url: str
    path_url: str
    host_url: str | None = None
    token: str | None = None
    created_at: float = 0.0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> PortInfo:
        return cls(
            sandbox_id=str(data.get("sandbox_id") or ""),
            port=int(data.get("port") or 0),
            public=bool(data.get("public")),
            url=str(data.get("url") or ""),
            path_url=str(data.get("path_url") or ""),
            host_url=data.get("host_url"),
            token=data.get("token"),
            created_at=float(data.get("created_at") or 0.0),
        )


@dataclass(frozen=True, slots=True)
class SandboxInfo(_Wire):
    """A sandbox as the daemon records it. `state` is one of creating, running, parked, stopped,
    killed, error.

    `secret_env_keys` names the env values given as secret at creation (the values themselves
    never leave the daemon); `brokered_secrets` the brokered secrets bound to it (in answers
    about one sandbox, not in listings); `parent_id` is the sandbox it was forked or restored from;
    `image_mib` the disk its parked memory image takes."""

    id: str
    state: str
    template: str = ""
    cpu: float = 0.0
    memory_mib: int = 0
    disk_mib: int = 0
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    expires_at: float | None = None
    error: str | None = None
    secret_env_keys: list[str] = field(default_factory=list)
    on_timeout: str = "kill"
    auto_park_idle: int | None = None
    auto_wake: bool = False
    parent_id: str | None = None
    image_mib: int = 0
    network: NetworkPolicy | None = None
    # From `info()` only: running but frozen for idleness (the next call thaws it first).
    frozen: bool = False
    # From `info()` (GET of one sandbox) only: its open ports, the project services' names it
    # resolves, and the project services that are ports of it.
    ports: list[PortInfo] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    serves_as: list[str] = field(default_factory=list)
    brokered_secrets: list[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SandboxInfo:
        return cls(
            id=str(data["id"]),
            state=str(data.get("state", "")),
            template=str(data.get("template", "")),
            cpu=float(data.get("cpu", 0.0)),
            memory_mib=int(data.get("memory_mib", 0)),
            disk_mib=int(data.get("disk_mib", 0)),
            env=dict(data.get("env") or {}),
            metadata=dict(data.get("metadata") or {}),
            created_at=float(data.get("created_at", 0.0)),
            expires_at=data.get("expires_at"),
            error=data.get("error"),
            secret_env_keys=[str(key) for key in data.get("secret_env_keys") or []],
            on_timeout=str(data.get("on_timeout") or "kill"),
            auto_park_idle=data.get("auto_park_idle"),
            auto_wake=bool(data.get("auto_wake", False)),
            parent_id=data.get("parent_id"),
            image_mib=int(data.get("image_mib") or 0),
            frozen=bool(data.get("frozen", False)),
            network=NetworkPolicy.from_wire(data["network"]) if data.get("network") else None,
            ports=[PortInfo.from_wire(item) for item in data.get("ports") or []],
            names=[str(name) for name in data.get("names") or []],
            serves_as=[str(name) for name in data.get("serves_as") or []],
            brokered_secrets=[str(name) for name in data.get("brokered_secrets") or []],
        )


@dataclass(frozen=True, slots=True)
class ResourceUsage(_Wire):
    total: float
    reserved: float
    free: float

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ResourceUsage:
        return cls(
            total=float(data.get("total", 0)),
            reserved=float(data.get("reserved", 0)),
            free=float(data.get("free", 0)),
        )


@dataclass(frozen=True, slots=True)
class Capacity(_Wire):
    """Workspace capacity: cpu in vCPUs (after overcommit), memory and disk in MiB."""

    cpu: ResourceUsage
    memory: ResourceUsage
    disk: ResourceUsage
    cpu_overcommit: int

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Capacity:
        return cls(
            cpu=ResourceUsage.from_wire(data.get("cpu") or {}),
            memory=ResourceUsage.from_wire(data.get("memory") or {}),
            disk=ResourceUsage.from_wire(data.get("disk") or {}),
            cpu_overcommit=int(data.get("cpu_overcommit", 1)),
        )


@dataclass(frozen=True, slots=True)
class SandboxMetrics(_Wire):
    """One sample of a running sandbox's use (`sbx.metrics()`, `corral top`): cpu in percent of
    its vCPUs since the previous sample, memory and disk in MiB, and its network traffic since it
    was created (over park and wake; not the daemon's own control channel to its agent): bytes and
    packets received (`net_rx_*`) and sent (`net_tx_*`)."""

    sandbox_id: str
    at: float
    cpu_count: float
    cpu_used_pct: float
    memory_used_mib: float
    memory_cache_mib: float
    memory_total_mib: int
    disk_used_mib: float
    disk_total_mib: int
    net_rx_bytes: int = 0
    net_rx_packets: int = 0
    net_tx_bytes: int = 0
    net_tx_packets: int = 0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SandboxMetrics:
        def mib(name: str) -> float:
            return round(float(data.get(name, 0)) / _MIB, 2)

        return cls(
            sandbox_id=str(data["sandbox_id"]),
            at=float(data.get("timestamp", 0.0)),
            cpu_count=float(data.get("cpu_count", 0.0)),
            cpu_used_pct=float(data.get("cpu_used_pct", 0.0)),
            memory_used_mib=mib("mem_used"),
            memory_cache_mib=mib("mem_cache"),
            memory_total_mib=int(mib("mem_total")),
            disk_used_mib=mib("disk_used"),
            disk_total_mib=int(mib("disk_total")),
            net_rx_bytes=int(data.get("net_rx_bytes", 0)),
            net_rx_packets=int(data.get("net_rx_packets", 0)),
            net_tx_bytes=int(data.get("net_tx_bytes", 0)),
            net_tx_packets=int(data.get("net_tx_packets", 0)),
        )


_MIB = 1024 * 1024
