"""Resource use of running sandboxes, sampled on demand from the runtime.

A sample holds CPU use (percent of the sandbox's CPU allowance, over the time since the previous
sample of the same sandbox, or since it booted for the first), memory in use and as file cache,
disk use against its limits, and network traffic (bytes and packets received and sent since the
sandbox was created, over park and wake, without the daemon's control channel: ``traffic.py``).
Nothing is stored here: a parked, killed or unknown sandbox has no sample. The previous CPU
reading of each sandbox is kept in memory only (bounded by the number of sandboxes asked about;
forgotten when a sandbox is no longer running).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from corral.network.base import Traffic
from corral.service.errors import StateConflict
from corral.service.model import SandboxState
from corral.service.sandboxes import SandboxService
from corral.service.traffic import recorded_traffic

__all__ = ["MetricsService", "SandboxMetrics"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class SandboxMetrics:
    sandbox_id: str
    timestamp: float
    cpu_count: float
    cpu_used_pct: float
    mem_used: int
    mem_total: int
    mem_cache: int
    disk_used: int
    disk_total: int
    net_rx_bytes: int = 0
    net_rx_packets: int = 0
    net_tx_bytes: int = 0
    net_tx_packets: int = 0


class MetricsService:
    """Samples ``Runtime.usage`` and the disk use of running sandboxes."""

    def __init__(self, sandboxes: SandboxService) -> None:
        self._sandboxes = sandboxes
        self._last_cpu: dict[str, tuple[float, float]] = {}  # id -> (monotonic, cpu seconds)

    def sandbox_counts(self) -> dict[str, int]:
        """How many sandboxes each state holds now, the ready ones of pools as ``pooled``
        (for ``GET /metrics``)."""
        counts: dict[str, int] = {}
        for record in self._sandboxes.db.sandboxes.list(states=None):
            state = "pooled" if record.pooled else record.state
            counts[state] = counts.get(state, 0) + 1
        return counts

    async def network_totals(self) -> Traffic:
        """The traffic of every sandbox running or parked now, summed (for ``GET /metrics``):
        what their records keep plus the live slots' counts, read concurrently."""
        records = self._sandboxes.db.sandboxes.list(
            states={SandboxState.RUNNING, SandboxState.PARKED}
        )
        live = await asyncio.gather(
            *(
                self._sandboxes.live.traffic(r.id)
                for r in records
                if r.state == SandboxState.RUNNING
            )
        )
        total = Traffic()
        for record in records:
            total += recorded_traffic(record)
        for counted in live:
            total += counted or Traffic()
        return total

    async def sample(self, sandbox_id: str) -> SandboxMetrics:
        """One sample now; StateConflict when the sandbox is not running."""
        record = self._sandboxes.get(sandbox_id)
        usage = await self._sandboxes.runtime.usage(sandbox_id)
        if record.state != SandboxState.RUNNING or usage is None:
            self._last_cpu.pop(sandbox_id, None)
            raise StateConflict(
                f"sandbox {sandbox_id} is {record.state}: only a running sandbox has metrics"
            )
        now, wall = time.monotonic(), time.time()
        before = self._last_cpu.get(sandbox_id)
        if before is None:
            elapsed, used = max(wall - record.created_at, 1e-3), usage.cpu_seconds
        else:
            elapsed, used = max(now - before[0], 1e-3), usage.cpu_seconds - before[1]
        self._last_cpu[sandbox_id] = (now, usage.cpu_seconds)
        cpus = max(record.cpu, 0.01)
        percent = min(max(used / (elapsed * cpus) * 100, 0.0), 100.0)
        disk_used = await self._sandboxes.runtime.disk_usage_mib(sandbox_id)
        live = await self._sandboxes.live.traffic(sandbox_id)
        traffic = recorded_traffic(record) + live if live else recorded_traffic(record)
        return SandboxMetrics(
            sandbox_id=sandbox_id,
            timestamp=wall,
            cpu_count=record.cpu,
            cpu_used_pct=round(percent, 2),
            mem_used=usage.memory_bytes,
            mem_total=record.memory_mib * MIB,
            mem_cache=usage.cache_bytes,
            disk_used=disk_used * MIB,
            disk_total=record.disk_mib * MIB,
            net_rx_bytes=traffic.rx_bytes,
            net_rx_packets=traffic.rx_packets,
            net_tx_bytes=traffic.tx_bytes,
            net_tx_packets=traffic.tx_packets,
        )
