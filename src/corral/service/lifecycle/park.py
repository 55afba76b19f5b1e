"""Park: checkpoint a running sandbox's memory and filesystem into ``<data>/parked/<id>`` and
free its cpu and memory; wake (``wake.py``) restores it under the same id.

Crash safety: the park records itself (operation ``parking``) before it touches the runtime and
writes the image to ``<id>.partial``, sealed (``images.seal_image``) only once complete; the
record says ``parked`` only after the seal. What a crash leaves, ``reconcile.py`` settles.
Concurrency: under the sandbox's lock; a second park while parking waits, then gets a
StateConflict. The runtime's leftovers (the stopped container, its disk) and the slot are
released in the background, ``TEARDOWN_GRACE`` after the answer, under the same lock: a wake
that comes first restores beside them and removes them itself (``Runtime.restore``), so it
never waits for a teardown it does not need; one that comes while they are being removed waits.
A teardown whose park a later one followed does nothing: the wake between removed it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
from pathlib import Path

from corral.config import Settings
from corral.network.base import Slot
from corral.paths import inside
from corral.runtime.base import Runtime, RuntimeFailure, RuntimeStatus
from corral.runtime.writeback import writing_back
from corral.service.crash import crash_point
from corral.service.errors import CapacityExceeded, OperationFailed
from corral.service.images import files_mib, host_free_mib, image_size_mib, parked_dir, seal_image
from corral.service.lifecycle.background import Background
from corral.service.model import Action, Operation, SandboxState, require_state
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.traffic import traffic_totals
from corral.storage import Database, SandboxRecord
from corral.timing import phase

__all__ = ["TEARDOWN_GRACE", "ParkService", "park_paths"]

log = logging.getLogger("corral.lifecycle")

# Seconds between a park's answer and the removal of what its sandbox ran on: a wake right after
# the park (the runtime removes them beside its restore) does not wait for it.
TEARDOWN_GRACE = 2.0


def park_paths(directory: Path, sandbox_id: str) -> tuple[Path, Path]:
    """The partial and the final image dirs of a sandbox's park, inside ``directory``."""
    return inside(directory, f"{sandbox_id}.partial"), inside(directory, sandbox_id)


class ParkService:
    """Parks running sandboxes (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        sandboxes: SandboxService,
        live: LiveSandboxes,
        admission: Admission,
    ) -> None:
        self.settings = settings
        self.db = db
        self.runtime = runtime
        self.sandboxes = sandboxes
        self.live = live
        self.admission = admission
        self.parked_dir = parked_dir(settings)
        self._background = Background()
        self._hurry = asyncio.Event()  # set: the clean-ups left skip their grace
        # The latest park of each sandbox with a clean-up still to come: an older park's
        # clean-up has nothing left to do (a wake came between, which removed it all).
        self._latest: dict[str, object] = {}

    async def drain(self) -> None:
        """Let post-park clean-ups finish now (daemon stop); they are short."""
        self._hurry.set()
        try:
            await self._background.drain()
        finally:
            self._hurry.clear()

    async def _check_space(self, record: SandboxRecord) -> None:
        """Refuse a park whose image might not fit, before anything changes."""
        used = await files_mib(self.runtime, record)
        estimate = record.memory_mib + used
        host_free = host_free_mib(self.parked_dir)
        report = self.admission.capacity()
        workspace_free = int(report.disk.free) + record.disk_mib  # its allowance comes back
        free = min(host_free, workspace_free)
        if estimate > free:
            raise CapacityExceeded(
                f"cannot park sandbox {record.id}: its image may take up to {estimate} MiB "
                f"of disk ({record.memory_mib} MiB memory + {used} MiB files) and only "
                f"{free} MiB is free; free some disk (kill sandboxes, remove snapshots)"
            )

    async def park(self, sandbox_id: str) -> SandboxRecord:
        async with self.sandboxes.locked(sandbox_id):
            record = self.sandboxes.get(sandbox_id)
            require_state(record, Action.PARK)
            await self.sandboxes.thaw(sandbox_id)
            with phase("admit"):
                await self.admission.admit_change(
                    dataclasses.replace(record, state=SandboxState.PARKED),
                    f"parking sandbox {sandbox_id}",
                )
            with phase("space check"):
                await self._check_space(record)
            partial, final = park_paths(self.parked_dir, sandbox_id)
            if partial.exists() or partial.is_symlink():  # a failed park's (a thread hop: ms)
                with phase("partial remove"):
                    await asyncio.to_thread(shutil.rmtree, partial, True)
            self.db.sandboxes.update(sandbox_id, operation=Operation.PARKING)
            crash_point(self.settings, "park:before-checkpoint")
            try:
                # fsynced when sealed, with the marker; written back to disk as it is written
                async with writing_back(partial):
                    await self.live.checkpoint(
                        sandbox_id, partial, leave_running=False, defer_cleanup=True, durable=False
                    )
            except RuntimeFailure as exc:
                await asyncio.to_thread(shutil.rmtree, partial, True)
                info = await self.runtime.info(sandbox_id)
                if info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED):
                    self.db.sandboxes.update(sandbox_id, operation=None)
                    raise OperationFailed(
                        f"parking sandbox {sandbox_id} failed; it is still running: {exc}"
                    ) from exc
                await self.sandboxes.fail(
                    sandbox_id, f"parking failed and the sandbox stopped: {exc}"
                )
                raise OperationFailed(f"parking sandbox {sandbox_id} failed: {exc}") from exc
            crash_point(self.settings, "park:after-checkpoint")
            # The slot's counts go with the slot: keep them in the record's totals. Read while
            # the image is sealed (a thread each; neither touches what the other does).
            sealing = asyncio.to_thread(
                seal_image, partial, final, root=self.parked_dir, sync_tree=True
            )
            _, counted = await asyncio.gather(sealing, self.live.traffic(sandbox_id))
            crash_point(self.settings, "park:after-image")
            slot = await self.live.detach(sandbox_id)
            size = await asyncio.to_thread(image_size_mib, final)
            log.info("sandbox %s: parked (%d MiB image)", sandbox_id, size)
            record = self.db.sandboxes.update(
                sandbox_id,
                state=SandboxState.PARKED,
                operation=None,
                slot_index=None,
                image_path=str(final),
                image_mib=size,
                **traffic_totals(self.db.sandboxes.get(sandbox_id), counted),
            )
            this_park = self._latest[sandbox_id] = object()
        # The image is safe and the record says parked: what the sandbox ran on (its stopped
        # container, its disk, its slot) goes in the background after a grace, under the
        # sandbox's lock (see the module docstring). A crash before then leaves nothing a
        # restart does not clear.
        self._background.run(self._after_park(sandbox_id, slot, this_park))
        return record

    async def _after_park(self, sandbox_id: str, slot: Slot | None, this_park: object) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), TEARDOWN_GRACE)
        # A later park came: a wake came between, which removed what this park left, so this
        # clean-up has nothing to do; the later park's is its own (done now, it would hold up
        # a wake right after that park under the lock the wake waits for).
        if self._latest.get(sandbox_id) is this_park:
            async with self.sandboxes.lock(sandbox_id):
                if self._latest.get(sandbox_id) is this_park:
                    del self._latest[sandbox_id]
                    try:
                        await self.runtime.cleanup(sandbox_id)
                    except RuntimeFailure as exc:
                        log.error("sandbox %s: %s", sandbox_id, exc)
        if slot is not None:
            await self.live.release_slot(sandbox_id, slot)
