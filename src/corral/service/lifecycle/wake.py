"""Wake: restore a parked sandbox under its own id, with its processes, into any free slot; and
auto-wake, which makes a parked sandbox that asked for it wake on its first use.

Crash safety: the wake reserves capacity and records itself (``running``/``waking``) before it
restores; the image is removed only after the record says running (and no longer names it), in
the background after the answer. ``reconcile.py`` settles an interrupted wake either way and
removes an image no record names. Waking a running sandbox answers it as it is.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from corral.config import Settings
from corral.paths import PathEscape, inside
from corral.runtime.agent_client import AgentClient
from corral.service.crash import crash_point
from corral.service.errors import OperationFailed
from corral.service.images import image_complete, parked_dir, remove_parked_image
from corral.service.lifecycle.background import Background
from corral.service.model import Action, SandboxState, require_state
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.live import LiveSandboxes
from corral.storage import Database, SandboxRecord
from corral.timing import phase

__all__ = ["WakeService"]

log = logging.getLogger("corral.lifecycle")


class WakeService:
    """Wakes parked sandboxes (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        sandboxes: SandboxService,
        live: LiveSandboxes,
        admission: Admission,
        activity: Activity,
    ) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.live = live
        self.admission = admission
        self.activity = activity
        self.parked_dir = parked_dir(settings)
        self._background = Background()

    async def wake(self, sandbox_id: str) -> SandboxRecord:
        """Restore a parked sandbox under its own id; waking a running one is a no-op."""
        async with self.sandboxes.locked(sandbox_id):
            record = self.sandboxes.get(sandbox_id)
            if record.state == SandboxState.RUNNING and not record.operation:
                return record
            require_state(record, Action.WAKE)
            if not image_complete(record.image_path):
                raise OperationFailed(
                    f"cannot wake sandbox {sandbox_id}: its memory image at "
                    f"{record.image_path} is missing or incomplete"
                )
            try:
                image = inside(self.parked_dir, record.image_path or "")
            except PathEscape as exc:
                raise OperationFailed(f"cannot wake sandbox {sandbox_id}: {exc}") from exc
            # From here it reserves cpu and memory like a running sandbox.
            with phase("admit"):
                await self.admission.admit_wake(record)
            crash_point(self.settings, "wake:before-restore")
            try:
                rootfs = self.sandboxes.rootfs_of(record)
                await self.live.boot(record, rootfs, record.env, image_dir=image)
            except BaseException:
                self.db.sandboxes.update(sandbox_id, state=SandboxState.PARKED, operation=None)
                raise
            crash_point(self.settings, "wake:after-restore")
            record = self.db.sandboxes.update(
                sandbox_id,
                state=SandboxState.RUNNING,
                operation=None,
                slot_index=self.live.slot_index_of(sandbox_id),
                image_path=None,
                image_mib=0,
                last_active_at=time.time(),
            )
            self.activity.touch(sandbox_id)
            # The record says running and names no image: the image is renamed out of the way
            # (a next park may take its name at once) and removed after the answer. A crash
            # first leaves an image no record names, which the restart's reconcile removes.
            aside = image.with_name(f"{image.name}.woken-{secrets.token_hex(4)}")
            try:
                image.rename(aside)
            except OSError as exc:  # then removed now, before a next park may take its name
                log.error("sandbox %s: setting its woken image aside failed: %s", sandbox_id, exc)
                await asyncio.to_thread(remove_parked_image, self.settings, image)
            else:
                self._background.run(asyncio.to_thread(remove_parked_image, self.settings, aside))
            log.info("sandbox %s: woken", sandbox_id)
        return record

    async def drain(self) -> None:
        """Let image removals finish (daemon stop)."""
        await self._background.drain()

    async def ensure_awake(self, sandbox_id: str) -> None:
        record = self.sandboxes.get(sandbox_id)
        if record.state == SandboxState.PARKED and record.auto_wake and not record.operation:
            await self.wake(sandbox_id)

    async def ready_agent(self, sandbox_id: str, action: str) -> AgentClient:
        """The agent client of a running sandbox (``SandboxService.agent``), waking it first
        if it is parked and asked for ``auto_wake``."""
        record = self.sandboxes.get(sandbox_id)
        if record.state == SandboxState.PARKED and record.auto_wake:
            record = await self.wake(sandbox_id)
        await self.sandboxes.thaw(sandbox_id)
        return self.sandboxes.agent(sandbox_id, action, record)
