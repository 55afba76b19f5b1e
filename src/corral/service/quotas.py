"""Quotas per API key: how much of the workspace one key's sandboxes may hold at once.

A key's quotas (``ApiKeyRecord.quotas``) cap, over the sandboxes it owns:

- ``running``: sandboxes creating or running (parked ones do not count);
- ``cpu``, ``memory_mib``: the vCPUs and memory reserved by those running sandboxes;
- ``disk_mib``: the disk of every live sandbox it owns (running and parked);
- ``parked``: parked sandboxes (each holds a memory image on disk).

A request that would go over one is refused with ``QuotaExceeded``, whose message names the quota,
the use and the excess. Checked at admission (create, fork, restore, import), at wake and at park,
inside the workspace's admission lock so that two requests never take the same headroom.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from corral.service.errors import CorralError
from corral.service.model import ACTIVE_STATES, SandboxState
from corral.storage import SandboxRecord

QUOTAS = ("running", "cpu", "memory_mib", "disk_mib", "parked")
_UNITS = {"running": "sandboxes", "cpu": "vCPUs", "memory_mib": "MiB", "disk_mib": "MiB"}
_UNITS["parked"] = "sandboxes"


class QuotaExceeded(CorralError):
    """A request over a quota of its API key."""

    code = "quota"


@dataclass(frozen=True)
class Usage:
    running: float = 0
    cpu: float = 0
    memory_mib: float = 0
    disk_mib: float = 0
    parked: float = 0

    def get(self, quota: str) -> float:
        return float(getattr(self, quota))


def usage_of(records: Iterable[SandboxRecord], owner: str | None) -> Usage:
    """What ``owner``'s live sandboxes hold now."""
    running = cpu = memory = disk = parked = 0.0
    for record in records:
        if record.owner != owner or record.pooled:
            continue
        if record.state in ACTIVE_STATES:
            running += 1
            cpu += record.cpu
            memory += record.memory_mib
            disk += record.disk_mib
        elif record.state == SandboxState.PARKED:
            parked += 1
            disk += record.disk_mib
    return Usage(running, cpu, memory, disk, parked)


def check_quotas(
    key_name: str, quotas: dict[str, float], usage: Usage, adding: Usage, what: str
) -> None:
    """Raise QuotaExceeded for the first quota that ``adding`` to ``usage`` would go over."""
    for quota in QUOTAS:
        limit = quotas.get(quota)
        need = adding.get(quota)
        if limit is None or need <= 0:
            continue
        used = usage.get(quota)
        if used + need > limit + 1e-9:
            unit = _UNITS[quota]
            raise QuotaExceeded(
                f"{what} is over the {quota} quota of API key {key_name!r}: quota {limit:g} "
                f"{unit}, in use {used:g}, this needs {need:g} more, {used + need - limit:g} "
                f"over; kill or park sandboxes of this key, or ask an admin to raise the quota"
            )
