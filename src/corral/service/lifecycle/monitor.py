"""The lifecycle monitor: once a second it ends sandboxes whose TTL ran out (kill, or park when
they asked for it), parks those idle past their ``auto_park_idle``, notices dead runtimes
(every few seconds) and prunes the records of long-ended sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from corral.config import Settings
from corral.service.errors import CorralError
from corral.service.lifecycle.park import ParkService
from corral.service.model import LIVE_STATES, SandboxState
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity
from corral.storage import Database

__all__ = ["Monitor"]

log = logging.getLogger("corral.lifecycle")


class Monitor:
    """The background task watching every live sandbox (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        sandboxes: SandboxService,
        parks: ParkService,
        activity: Activity,
    ) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.parks = parks
        self.activity = activity
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="lifecycle-monitor")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        health_every = 3.0
        last_health = 0.0
        prune_every = min(60.0, max(1.0, self.settings.ended_retention_seconds / 4))
        last_prune = 0.0
        while True:
            try:
                await self._expire_and_idle()
                if time.monotonic() - last_prune >= prune_every:
                    last_prune = time.monotonic()
                    pruned = self.sandboxes.prune_ended(time.time())
                    if pruned:
                        log.info("pruned the records of %d ended sandboxes", len(pruned))
                if time.monotonic() - last_health >= health_every:
                    last_health = time.monotonic()
                    for record in self.db.sandboxes.list(states={SandboxState.RUNNING}):
                        if self.sandboxes.freezer.is_frozen(record.id):
                            continue  # a frozen sandbox costs nothing; its thaw checks it
                        if not record.operation and not self.sandboxes.lock(record.id).locked():
                            await self.sandboxes.check_alive(record)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lifecycle monitor pass failed")
            await asyncio.sleep(1.0)

    async def _expire_and_idle(self) -> None:
        now = time.time()
        # Running sandboxes, and any other live one with a TTL: a parked sandbox without one
        # needs nothing here (2,000 of them read every second blocked the event loop).
        watched = self.db.sandboxes.list_in_or_expiring({SandboxState.RUNNING}, LIVE_STATES)
        for record in watched:
            if record.operation:
                continue
            expired = record.expires_at is not None and record.expires_at <= now
            if expired and record.on_timeout == "park" and record.state == SandboxState.RUNNING:
                log.info("sandbox %s: TTL ran out; parking it", record.id)
                if await self._try_park(record.id):
                    self.db.sandboxes.update(record.id, expires_at=None)
                else:
                    await self.sandboxes.kill(record.id)
            elif expired:
                log.info("sandbox %s: TTL ran out; killing it", record.id)
                await self.sandboxes.kill(record.id)
            elif (
                record.state == SandboxState.RUNNING
                and record.auto_park_idle
                and not self.activity.in_use(record.id)
                and self.activity.last_active(record) + record.auto_park_idle <= now
            ):
                log.info("sandbox %s: idle for %ss; parking it", record.id, record.auto_park_idle)
                await self._try_park(record.id)
            elif (
                record.state == SandboxState.RUNNING
                and self.settings.freeze_idle_seconds
                and not self.sandboxes.freezer.is_frozen(record.id)
                and self.sandboxes.idle_for(record, self.settings.freeze_idle_seconds, now)
            ):
                await self.sandboxes.freeze_if_idle(record)

    async def _try_park(self, sandbox_id: str) -> bool:
        try:
            await self.parks.park(sandbox_id)
            return True
        except CorralError as exc:
            log.error("sandbox %s: automatic park failed: %s", sandbox_id, exc)
            self.activity.touch(sandbox_id)  # don't retry every second
            return False
