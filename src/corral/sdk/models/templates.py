"""Templates and snapshots: the catalog's entries, what an import made, and the keys trusted to sign
exports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.sdk._exec_models import _Wire
from corral.sdk.models.sandboxes import SandboxInfo

__all__ = ["ImportResult", "SnapshotInfo", "TemplateInfo", "TrustedKey"]


@dataclass(frozen=True, slots=True)
class TemplateInfo(_Wire):
    """A template: image, defaults (cpu, memory, disk, env, workdir, user, start command),
    ceilings (`max_*`, None = the workspace's), layers and the live sandboxes using it."""

    name: str
    image: str = ""
    cpu: float = 0.0
    memory_mib: int = 0
    disk_mib: int = 0
    created_at: float = 0.0
    source: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    start_cmd: list[str] | None = None
    max_cpu: float | None = None
    max_memory_mib: int | None = None
    max_disk_mib: int | None = None
    warmup: str | None = None
    warm: bool = False
    pool: int = 0
    warm_ready: bool = False
    pool_ready: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    layers: list[str] = field(default_factory=list)
    used_by: list[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> TemplateInfo:
        return cls(
            name=str(data["name"]),
            image=str(data.get("image", "")),
            cpu=float(data.get("cpu", 0.0)),
            memory_mib=int(data.get("memory_mib", 0)),
            disk_mib=int(data.get("disk_mib", 0)),
            created_at=float(data.get("created_at", 0.0)),
            source=str(data.get("source") or ""),
            env=dict(data.get("env") or {}),
            workdir=data.get("workdir"),
            user=data.get("user"),
            start_cmd=data.get("start_cmd"),
            max_cpu=data.get("max_cpu"),
            max_memory_mib=data.get("max_memory_mib"),
            max_disk_mib=data.get("max_disk_mib"),
            warmup=data.get("warmup"),
            warm=bool(data.get("warm", False)),
            pool=int(data.get("pool") or 0),
            warm_ready=bool(data.get("warm_ready", False)),
            pool_ready=int(data.get("pool_ready") or 0),
            labels=dict(data.get("labels") or {}),
            layers=list(data.get("layers") or []),
            used_by=list(data.get("used_by") or []),
        )


@dataclass(frozen=True, slots=True)
class SnapshotInfo(_Wire):
    """A saved sandbox state that `create(snapshot=name)` restores from, any number of times.

    `kind` is `memory` (processes included) or `fs` (files only); `source_id` is the sandbox it
    was taken from; `size_mib` the disk it takes."""

    name: str
    kind: str = "memory"
    source_id: str = ""
    template: str = ""
    cpu: float = 0.0
    memory_mib: int = 0
    disk_mib: int = 0
    size_mib: int = 0
    created_at: float = 0.0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SnapshotInfo:
        return cls(
            name=str(data["name"]),
            kind=str(data.get("kind", "memory")),
            source_id=str(data.get("source_id", "")),
            template=str(data.get("template", "")),
            cpu=float(data.get("cpu", 0.0)),
            memory_mib=int(data.get("memory_mib", 0)),
            disk_mib=int(data.get("disk_mib", 0)),
            size_mib=int(data.get("size_mib", 0)),
            created_at=float(data.get("created_at", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class ImportResult(_Wire):
    """What an imported file held: a parked sandbox (`kind == "sandbox"`) or a snapshot."""

    kind: str
    sandbox: SandboxInfo | None = None
    snapshot: SnapshotInfo | None = None
    signer: str | None = None  # the trusted key's name; None for an fs-only untrusted import

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ImportResult:
        sandbox = data.get("sandbox")
        snapshot = data.get("snapshot")
        signer = data.get("signer") or {}
        return cls(
            kind=str(data.get("kind", "")),
            sandbox=SandboxInfo.from_wire(sandbox) if sandbox else None,
            snapshot=SnapshotInfo.from_wire(snapshot) if snapshot else None,
            signer=signer.get("name"),
        )


@dataclass(frozen=True, slots=True)
class TrustedKey(_Wire):
    """A signer whose exports this workspace restores with memory (`corral trust add`)."""

    name: str
    public_key: str
    created_at: float = 0.0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> TrustedKey:
        return cls(
            name=str(data["name"]),
            public_key=str(data["public_key"]),
            created_at=float(data.get("created_at", 0.0)),
        )
