"""Plain records the repositories hand to the service (no ORM state attached)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SandboxRecord:
    """One sandbox as recorded. ``operation`` names an action in flight (e.g. ``creating``)
    so that a daemon killed mid-way can tell, at the next start, what was interrupted."""

    id: str
    state: str
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    error: str | None = None
    slot_index: int | None = None
    operation: str | None = None


@dataclass(frozen=True)
class ApiKeyRecord:
    id: str
    name: str
    key_hash: str
    role: str
    created_at: float


@dataclass(frozen=True)
class TemplateRecord:
    name: str
    image: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str]
    created_at: float
