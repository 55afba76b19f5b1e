"""The lifecycle of live sandboxes as one service: park, wake and fork with running processes
(``park.py``, ``wake.py``, ``fork.py``), reconciliation at start (``reconcile.py``) and the
monitor (``monitor.py``). This module only starts and stops them in order.

Concurrency: every action holds the sandbox's lock; a second park while parking waits, then gets
a StateConflict; wake of a running sandbox answers the sandbox as it is; kill during a fork waits
for the checkpoint and then kills only the source.
"""

from __future__ import annotations

from corral.service.lifecycle.fork import ForkService
from corral.service.lifecycle.monitor import Monitor
from corral.service.lifecycle.park import ParkService
from corral.service.lifecycle.reconcile import Reconciler
from corral.service.lifecycle.wake import WakeService
from corral.service.sandboxes.live import LiveSandboxes
from corral.storage import SandboxRecord

__all__ = ["LifecycleService"]


class LifecycleService:
    """Park, wake, fork, reconciliation and the monitor of one workspace."""

    def __init__(
        self,
        parks: ParkService,
        wakes: WakeService,
        forks: ForkService,
        reconciler: Reconciler,
        monitor: Monitor,
        live: LiveSandboxes,
    ) -> None:
        self.parks = parks
        self.wakes = wakes
        self.forks = forks
        self.reconciler = reconciler
        self.monitor = monitor
        self.live = live
        self.parked_dir = parks.parked_dir
        self.work_dir = forks.work_dir

    async def start(self, *, monitor: bool = True) -> None:
        for directory in (self.parked_dir, self.work_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        await self.reconciler.reconcile()
        if monitor:
            self.monitor.start()

    async def stop(self) -> None:
        """Stop watching; running sandboxes stay running and are re-adopted at the next start."""
        await self.monitor.stop()
        await self.parks.drain()
        await self.wakes.drain()
        await self.live.close_clients()

    async def park(self, sandbox_id: str) -> SandboxRecord:
        return await self.parks.park(sandbox_id)

    async def wake(self, sandbox_id: str) -> SandboxRecord:
        return await self.wakes.wake(sandbox_id)

    async def fork(self, sandbox_id: str, count: int) -> list[SandboxRecord]:
        return await self.forks.fork(sandbox_id, count)
