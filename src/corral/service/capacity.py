"""Workspace capacity: what is total, reserved and free, and admission of new reservations.

Model (DESIGN.md): cpu may be overcommitted by ``cpu_overcommit``; memory never; a running (or
creating) sandbox reserves its cpu, memory and disk; a parked one only the disk its image takes;
snapshots reserve the disk their images take. Reservations are
derived from the store, so they are right after a restart; ``admit`` is called under the service's
admission lock, so two concurrent requests cannot both take the last free MiB. ``held`` are the
reservations no sandbox record backs (template build sandboxes): in memory, as the builds are.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.config import Settings
from corral.service.errors import CapacityExceeded
from corral.service.model import ACTIVE_STATES, SandboxState
from corral.storage import SandboxRecord


@dataclass(frozen=True)
class Usage:
    total: float
    reserved: float

    @property
    def free(self) -> float:
        return self.total - self.reserved


@dataclass(frozen=True)
class Reserved:
    """What sandbox records reserve: vCPUs, memory MiB, disk MiB."""

    cpu: float = 0.0
    memory_mib: float = 0.0
    disk_mib: float = 0.0

    def __sub__(self, other: Reserved) -> Reserved:
        return Reserved(
            self.cpu - other.cpu, self.memory_mib - other.memory_mib, self.disk_mib - other.disk_mib
        )


# What a record reserves by state (the model above): the store sums the same in SQL.
RESERVING_ALL = ACTIVE_STATES
RESERVING_IMAGE = frozenset({SandboxState.PARKED})


def reserved_by(records: list[SandboxRecord]) -> Reserved:
    """The reservations of ``records``, summed here (the store's ``reserved`` does it in SQL)."""
    cpu = memory = disk = 0.0
    for record in records:
        if record.state in RESERVING_ALL:
            cpu += record.cpu
            memory += record.memory_mib
            disk += record.disk_mib
        elif record.state in RESERVING_IMAGE:
            disk += record.image_mib
    return Reserved(cpu, memory, disk)


@dataclass(frozen=True)
class CapacityReport:
    cpu: Usage
    memory: Usage
    disk: Usage
    cpu_overcommit: int


class CapacityModel:
    """Computes capacity from settings and sandbox records."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.held: dict[str, tuple[float, int, int]] = {}
        """key -> (cpu, memory MiB, disk MiB) reserved outside the sandbox records."""

    def report(self, reserved: Reserved, snapshot_mib: int = 0) -> CapacityReport:
        """Totals and reservations: ``reserved`` by the sandbox records (``reserved_by``, or the
        store's sum), plus snapshots and ``held``."""
        cpu, memory = reserved.cpu, reserved.memory_mib
        disk = reserved.disk_mib + float(snapshot_mib)
        for held_cpu, held_memory, held_disk in self.held.values():
            cpu += held_cpu
            memory += held_memory
            disk += held_disk
        s = self._settings
        return CapacityReport(
            cpu=Usage(s.cpus * s.cpu_overcommit, cpu),
            memory=Usage(float(s.memory_mib), memory),
            disk=Usage(float(s.disk_mib), disk),
            cpu_overcommit=s.cpu_overcommit,
        )

    def admit(
        self,
        reserved: Reserved,
        *,
        cpu: float,
        memory_mib: int,
        disk_mib: int,
        snapshot_mib: int = 0,
    ) -> None:
        """Raise CapacityExceeded naming the first resource that does not fit, with numbers."""
        report = self.report(reserved, snapshot_mib)
        asks = (
            ("cpu", cpu, report.cpu, "vCPUs"),
            ("memory", memory_mib, report.memory, "MiB"),
            ("disk", disk_mib, report.disk, "MiB"),
        )
        for name, ask, usage, unit in asks:
            if ask > usage.free + 1e-9:
                raise CapacityExceeded(
                    f"not enough free {name} in the workspace: asked for {ask:g} {unit}, "
                    f"{usage.free:g} of {usage.total:g} {unit} free "
                    f"({usage.reserved:g} reserved); kill or park sandboxes, or ask for less"
                )
