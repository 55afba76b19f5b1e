"""Reconciliation at start: settle every sandbox in a true state after a (possibly unclean)
daemon stop, from the facts on disk and in the runtime.

Every action records itself in the sandbox's ``operation`` before it touches the runtime, and
writes images to a ``.partial`` directory sealed only once complete (``images.seal_image``).
``reconcile`` reads those facts:

    state/operation      image complete?   runtime running?   settles as
    running/parking      yes               any                parked (runtime leftovers removed)
    running/parking      written, unsealed checkpointed       parked (the image is sealed first)
    running/parking      no                yes                running (partial image removed)
    running/waking       -                 yes, slot recorded running (image removed)
    running/waking       -                 no, or no slot     parked (runtime removed; the image
                                                              was never removed)
    creating/*           -                 -                  removed (never reported as made)
    running/forking      -                 yes                running; unfinished children removed
    */killing            -                 -                  killed
    parked               no                -                  error (its image is missing)
    running              -                 no                 error (its runtime was gone)

Runtime sandboxes no record owns are destroyed, scratch images and parked images no record names
removed, stale slots reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from pathlib import Path

from corral.config import Settings
from corral.runtime.base import Runtime, RuntimeFailure, RuntimeStatus
from corral.service.images import (
    image_complete,
    image_size_mib,
    parked_dir,
    remove_parked_image,
    seal_image,
    work_dir,
)
from corral.service.lifecycle.park import park_paths
from corral.service.model import LIVE_STATES, Operation, SandboxState
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.live import LiveSandboxes
from corral.storage import Database, SandboxRecord

__all__ = ["Reconciler"]

log = logging.getLogger("corral.lifecycle")


class Reconciler:
    """Settles every sandbox at start (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        sandboxes: SandboxService,
        live: LiveSandboxes,
    ) -> None:
        self.settings = settings
        self.db = db
        self.runtime = runtime
        self.sandboxes = sandboxes
        self.live = live
        self.parked_dir = parked_dir(settings)
        self.work_dir = work_dir(settings)

    async def reconcile(self) -> None:
        """Settle every sandbox in a true state after a (possibly unclean) daemon stop."""
        adopted: set[str] = set()
        for record in self.db.sandboxes.list(states=LIVE_STATES):
            try:
                if await self._reconcile_one(record):
                    adopted.add(record.id)
            except Exception as exc:
                log.exception("sandbox %s: reconciling failed", record.id)
                await self.sandboxes.fail(
                    record.id, f"could not be recovered after a restart: {exc}"
                )
        for sandbox_id in await self.runtime.list_ids():
            known = self.db.sandboxes.get(sandbox_id)
            if sandbox_id in adopted or (known is not None and known.state == SandboxState.PARKED):
                continue
            log.warning("sandbox %s: removing orphaned runtime resources", sandbox_id)
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.destroy(sandbox_id)
        for leftover in self.work_dir.glob("*"):
            await asyncio.to_thread(shutil.rmtree, leftover, True)
        for partial in self.parked_dir.glob("*.partial"):
            await asyncio.to_thread(shutil.rmtree, partial, True)
        for unnamed in await asyncio.to_thread(self._unnamed_images):
            log.warning("removing the image %s, which no sandbox names", unnamed)
            await asyncio.to_thread(shutil.rmtree, unnamed, True)
        reap = getattr(self.live.network, "reap_stale", None)
        if reap is not None:
            await reap({i for i in (self.live.slot_index_of(s) for s in adopted) if i is not None})

    def _unnamed_images(self) -> list[Path]:
        """Images in the parked dir that no record names: a woken sandbox's whose removal (after
        the wake answered) a stop cut short, or an import's sealed before its record was."""
        unnamed = []
        for entry in self.parked_dir.iterdir():
            record = self.db.sandboxes.get(entry.name)
            image = record.image_path if record is not None else None
            if image is None or Path(image).resolve() != entry.resolve():
                unnamed.append(entry)
        return unnamed

    async def _reconcile_one(self, record: SandboxRecord) -> bool:
        """Settle one sandbox; True when it is running and re-adopted."""
        op = record.operation
        if record.state == SandboxState.CREATING:
            log.warning("sandbox %s: %s was interrupted; removing it", record.id, op)
            await self.live.release_resources(record.id, record.slot_index)
            self.db.sandboxes.delete(record.id)
            return False
        if op == Operation.KILLING:
            await self.sandboxes.kill(record.id)
            return False
        if record.state == SandboxState.PARKED:
            if not image_complete(record.image_path):
                await self.sandboxes.fail(
                    record.id, f"its parked image {record.image_path} is missing"
                )
            else:  # a post-park clean-up that a stop cut short
                with contextlib.suppress(RuntimeFailure):
                    await self.runtime.cleanup(record.id)
            return False
        partial, final = park_paths(self.parked_dir, record.id)
        if op == Operation.PARKING:
            if image_complete(partial) and not image_complete(final):
                os.replace(partial, final)
            elif partial.is_dir() and not image_complete(final):
                # The runtime marks a sandbox checkpointed only once runsc has written the
                # image and it is fsynced: the checkpoint finished and only the seal is missing.
                # Dropping that image would lose the sandbox's processes.
                info = await self.runtime.info(record.id)
                if info.status is RuntimeStatus.STOPPED and info.detail == "checkpointed":
                    await asyncio.to_thread(seal_image, partial, final, root=self.parked_dir)
            if image_complete(final):
                await self.live.release_resources(record.id, record.slot_index)
                self.db.sandboxes.update(
                    record.id,
                    state=SandboxState.PARKED,
                    operation=None,
                    slot_index=None,
                    image_path=str(final),
                    image_mib=await asyncio.to_thread(image_size_mib, final),
                )
                log.info("sandbox %s: an interrupted park had finished; parked", record.id)
                return False
            await asyncio.to_thread(shutil.rmtree, partial, True)
        # Frozen for idleness by the daemon before: thawed first (runsc state waits on a frozen
        # sandbox; thawing one that is not frozen or not running does nothing).
        with contextlib.suppress(RuntimeFailure):
            await self.runtime.thaw(record.id)
        info = await self.runtime.info(record.id)
        alive = info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED)
        # A wake records its slot in the commit that ends it: without one it did not finish, and
        # its restore (if any) is undone; the image it restored from is still whole.
        if op == Operation.WAKING and (not alive or record.slot_index is None):
            await self.live.release_resources(record.id, record.slot_index)
            self.db.sandboxes.update(
                record.id, state=SandboxState.PARKED, operation=None, slot_index=None
            )
            log.info("sandbox %s: an interrupted wake left it parked", record.id)
            return False
        image_key = None
        if op == Operation.WAKING and record.image_path:
            image_key = self.live.keys.of_image(Path(record.image_path))
        if alive and await self.live.adopt(record, image_key):
            if info.status is RuntimeStatus.PAUSED:
                await self.runtime.resume(record.id)
            self.db.sandboxes.update(record.id, operation=None)
            if op == Operation.WAKING and record.image_path:
                await asyncio.to_thread(remove_parked_image, self.settings, record.image_path)
                self.db.sandboxes.update(record.id, image_path=None, image_mib=0)
            return True
        await self.sandboxes.fail(
            record.id, f"its runtime was {info.status.value} when the daemon restarted"
        )
        return False
