"""Park, wake and fork with running processes; reconciliation at start; the lifecycle monitor.

Park checkpoints a sandbox's memory and filesystem into ``<data>/parked/<id>`` and frees its cpu
and memory; wake restores it under the same id into any free slot; fork checkpoints a running
sandbox (which keeps running) and restores the image into N new sandboxes.

Crash safety. Every action records itself in the sandbox's ``operation`` before it touches the
runtime, and writes images to a ``.partial`` directory that is fsynced, marked complete (marker
file, fsynced) and only then renamed into place. ``reconcile`` reads those facts after a restart:

    state/operation      image complete?   runtime running?   settles as
    running/parking      yes               any                parked (runtime leftovers removed)
    running/parking      written, unsealed checkpointed       parked (the image is sealed first)
    running/parking      no                yes                running (partial image removed)
    running/waking       -                 yes                running (image removed)
    running/waking       -                 no                 parked (the image was never removed)
    creating/*           -                 -                  removed (never reported as made)
    running/forking      -                 yes                running; unfinished children removed

Concurrency: every action holds the sandbox's lock; a second park while parking waits, then gets
a StateConflict; wake of a running sandbox answers the sandbox as it is; kill during a fork waits
for the checkpoint and then kills only the source.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from corral.network.base import Slot
from corral.paths import PathEscape, inside
from corral.runtime.base import RuntimeFailure, RuntimeStatus
from corral.service import access
from corral.service.crash import crash_point
from corral.service.errors import (
    CapacityExceeded,
    CorralError,
    InvalidRequest,
    OperationFailed,
    StateConflict,
)
from corral.service.images import image_complete, image_size_mib, seal_image
from corral.service.model import LIVE_STATES, new_sandbox_id, require_state
from corral.service.sandboxes import SandboxService
from corral.storage import SandboxRecord

log = logging.getLogger("corral.lifecycle")

MAX_FORK = 64
FORK_CONCURRENCY = 4


class LifecycleService:
    """Park, wake, fork, reconciliation and the monitor (TTL, idle auto-park, death checks)."""

    def __init__(self, sandboxes: SandboxService) -> None:
        self.sb = sandboxes
        self.settings = sandboxes.settings
        self.db = sandboxes.db
        self.runtime = sandboxes.runtime
        data = self.settings.data_dir
        self.parked_dir = data / "parked"
        self.work_dir = data / "work"
        self._monitor: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        sandboxes.wake_hook = self.wake

    # ---------------------------------------------------------------------- start and stop
    async def start(self, *, monitor: bool = True) -> None:
        for directory in (self.parked_dir, self.work_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        await self.reconcile()
        if monitor:
            self._monitor = asyncio.create_task(self._monitor_loop(), name="lifecycle-monitor")

    async def stop(self) -> None:
        """Stop watching; running sandboxes stay running and are re-adopted at the next start."""
        if self._monitor:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self._background:  # let post-park clean-ups finish; they are short
            await asyncio.wait(set(self._background), timeout=10)
        await self.sb.close_clients()

    def crash_point(self, step: str) -> None:
        """Crash tests only: die here, as SIGKILL would, when told to (CORRAL_CRASH_AT)."""
        crash_point(self.settings, step)

    # ---------------------------------------------------------------------------- park
    def _park_paths(self, sandbox_id: str) -> tuple[Path, Path]:
        return (
            inside(self.parked_dir, f"{sandbox_id}.partial"),
            inside(self.parked_dir, sandbox_id),
        )

    async def _check_park_space(self, record: SandboxRecord) -> None:
        """Refuse a park whose image might not fit, before anything changes."""
        try:
            used = await self.runtime.disk_usage_mib(record.id)
        except RuntimeFailure:
            used = record.disk_mib
        estimate = record.memory_mib + used
        host_free = shutil.disk_usage(self.parked_dir).free // (1024 * 1024)
        report = self.sb.capacity()
        workspace_free = int(report.disk.free) + record.disk_mib  # its allowance comes back
        free = min(host_free, workspace_free)
        if estimate > free:
            raise CapacityExceeded(
                f"cannot park sandbox {record.id}: its image may take up to {estimate} MiB "
                f"of disk ({record.memory_mib} MiB memory + {used} MiB files) and only "
                f"{free} MiB is free; free some disk (kill sandboxes, remove snapshots)"
            )

    async def park(self, sandbox_id: str) -> SandboxRecord:
        async with self.sb.lock(sandbox_id):
            record = self.sb.get(sandbox_id)
            require_state(record, "park", "running")
            await self.sb.thaw(sandbox_id)
            async with self.sb.admission:
                self.sb.check_quotas(
                    self.db.sandboxes.list(states=LIVE_STATES),
                    [dataclasses.replace(record, state="parked")],
                    f"parking sandbox {sandbox_id}",
                )
            await self._check_park_space(record)
            partial, final = self._park_paths(sandbox_id)
            shutil.rmtree(partial, ignore_errors=True)
            self.db.sandboxes.update(sandbox_id, operation="parking")
            self.crash_point("park:before-checkpoint")
            try:
                await self.sb.checkpoint(
                    sandbox_id, partial, leave_running=False, defer_cleanup=True
                )
            except RuntimeFailure as exc:
                shutil.rmtree(partial, ignore_errors=True)
                info = await self.runtime.info(sandbox_id)
                if info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED):
                    self.db.sandboxes.update(sandbox_id, operation=None)
                    raise OperationFailed(
                        f"parking sandbox {sandbox_id} failed; it is still running: {exc}"
                    ) from exc
                await self.sb.fail(sandbox_id, f"parking failed and the sandbox stopped: {exc}")
                raise OperationFailed(f"parking sandbox {sandbox_id} failed: {exc}") from exc
            self.crash_point("park:after-checkpoint")
            await asyncio.to_thread(seal_image, partial, final, root=self.parked_dir)
            self.crash_point("park:after-image")
            slot = await self.sb.detach(sandbox_id)
            size = await asyncio.to_thread(image_size_mib, final)
            log.info("sandbox %s: parked (%d MiB image)", sandbox_id, size)
            record = self.db.sandboxes.update(
                sandbox_id,
                state="parked",
                operation=None,
                slot_index=None,
                image_path=str(final),
                image_mib=size,
            )
        # The image is safe and the record says parked: what the sandbox ran on (its stopped
        # container, its disk, its slot) goes in the background, under the sandbox's lock, so a
        # wake waits for it. A crash before then leaves nothing a restart does not clear.
        self._in_background(self._after_park(sandbox_id, slot))
        return record

    async def _after_park(self, sandbox_id: str, slot: Slot | None) -> None:
        async with self.sb.lock(sandbox_id):
            try:
                await self.runtime.cleanup(sandbox_id)
            except RuntimeFailure as exc:
                log.error("sandbox %s: %s", sandbox_id, exc)
        if slot is not None:
            await self.sb.release_slot(sandbox_id, slot)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---------------------------------------------------------------------------- wake
    async def wake(self, sandbox_id: str) -> SandboxRecord:
        """Restore a parked sandbox under its own id; waking a running one is a no-op."""
        async with self.sb.lock(sandbox_id):
            record = self.sb.get(sandbox_id)
            if record.state == "running" and not record.operation:
                return record
            require_state(record, "wake", "parked")
            if not image_complete(record.image_path):
                raise OperationFailed(
                    f"cannot wake sandbox {sandbox_id}: its memory image at "
                    f"{record.image_path} is missing or incomplete"
                )
            try:
                image = inside(self.parked_dir, record.image_path or "")
            except PathEscape as exc:
                raise OperationFailed(f"cannot wake sandbox {sandbox_id}: {exc}") from exc
            async with self.sb.admission:
                live = [r for r in self.db.sandboxes.list(states=LIVE_STATES) if r.id != record.id]
                self.sb.check_quotas(
                    [*live, record],
                    [dataclasses.replace(record, state="running")],
                    f"waking sandbox {sandbox_id}",
                )
                self.sb.capacity_model.admit(
                    live,
                    cpu=record.cpu,
                    memory_mib=record.memory_mib,
                    disk_mib=record.disk_mib + record.image_mib,
                    snapshot_mib=sum(s.size_mib for s in self.db.snapshots.list()),
                )
                # From here it reserves cpu and memory like a running sandbox.
                self.db.sandboxes.update(sandbox_id, state="running", operation="waking")
            self.crash_point("wake:before-restore")
            try:
                rootfs = self.sb.rootfs_of(record)
                await self.sb.boot(record, rootfs, record.env, image_dir=image)
            except BaseException:
                self.db.sandboxes.update(sandbox_id, state="parked", operation=None)
                raise
            self.crash_point("wake:after-restore")
            record = self.db.sandboxes.update(
                sandbox_id,
                state="running",
                operation=None,
                image_path=None,
                image_mib=0,
                last_active_at=time.time(),
            )
            self.sb.touch(sandbox_id)
            await asyncio.to_thread(self.sb.remove_image, image)
            log.info("sandbox %s: woken", sandbox_id)
            return record

    async def ensure_awake(self, sandbox_id: str) -> None:
        record = self.sb.get(sandbox_id)
        if record.state == "parked" and record.auto_wake and not record.operation:
            await self.wake(sandbox_id)

    # ---------------------------------------------------------------------------- fork
    async def fork(self, sandbox_id: str, count: int) -> list[SandboxRecord]:
        """N new sandboxes continuing from the source's current state; the source runs on."""
        if not 1 <= count <= MAX_FORK:
            raise InvalidRequest(f"fork count must be 1..{MAX_FORK}, got {count}")
        self.sb.policy.check_forks(count)
        image = inside(self.work_dir, f"fork-{sandbox_id}-{new_sandbox_id()[3:]}")
        async with self.sb.lock(sandbox_id):
            source = self.sb.get(sandbox_id)
            require_state(source, "fork", "running")
            refuse_secrets(source, "fork")
            await self.sb.thaw(sandbox_id)
            now = time.time()
            ttl = (source.expires_at - source.created_at) if source.expires_at else None
            children = [
                SandboxRecord(
                    id=new_sandbox_id(),
                    state="creating",
                    template=source.template,
                    cpu=source.cpu,
                    memory_mib=source.memory_mib,
                    disk_mib=source.disk_mib,
                    env=dict(source.env),
                    metadata=dict(source.metadata),
                    created_at=now,
                    expires_at=now + ttl if ttl else None,
                    operation="forking",
                    on_timeout=source.on_timeout,
                    auto_park_idle=source.auto_park_idle,
                    auto_wake=source.auto_wake,
                    parent_id=source.id,
                    last_active_at=now,
                    network=source.network,
                    owner=access.new_owner(),
                )
                for _ in range(count)
            ]
            await self.sb.admit(children)
            if self.sb.secrets is not None:
                for child in children:  # their memory holds the parent's placeholders
                    self.sb.secrets.inherit(child.id, source.id)
            self.db.sandboxes.update(sandbox_id, operation="forking")
            try:
                self.crash_point("fork:before-checkpoint")
                await self.sb.checkpoint(sandbox_id, image, leave_running=True)
            except BaseException as exc:
                for child in children:
                    self.db.sandboxes.delete(child.id)
                    if self.sb.secrets is not None:
                        self.sb.secrets.forget(child.id)
                shutil.rmtree(image, ignore_errors=True)
                if isinstance(exc, RuntimeFailure):
                    raise OperationFailed(f"forking sandbox {sandbox_id} failed: {exc}") from exc
                raise
            finally:
                with contextlib.suppress(KeyError):
                    self.db.sandboxes.update(sandbox_id, operation=None)
        self.crash_point("fork:after-checkpoint")
        results: list[SandboxRecord | BaseException] = []
        try:
            rootfs = self.sb.rootfs_of(source)
            template = self.sb.templates.get(source.template)
            image_ref = self.sb.templates.image_of(source.id) or template.image
            for child in children:
                self.sb.templates.pin_image(child.id, template, image_ref)
            limit = asyncio.Semaphore(FORK_CONCURRENCY)

            async def restore(child: SandboxRecord) -> SandboxRecord:
                async with limit, self.sb.lock(child.id):
                    await self.sb.boot(child, rootfs, child.env, image_dir=image)
                    return self.db.sandboxes.update(child.id, state="running", operation=None)

            results = list(
                await asyncio.gather(
                    *(restore(child) for child in children), return_exceptions=True
                )
            )
        except BaseException as exc:
            results = [exc]
        finally:
            await asyncio.to_thread(shutil.rmtree, image, True)
        made = [r for r in results if isinstance(r, SandboxRecord)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            # All or nothing: a fork that made only some copies would surprise its caller.
            for record in made:
                await self.sb.release_resources(record.id, record.slot_index)
            for child in children:
                self.db.sandboxes.delete(child.id)
                if self.sb.secrets is not None:
                    self.sb.secrets.forget(child.id)
            first = failed[0]
            if isinstance(first, CorralError):
                raise first
            raise OperationFailed(f"forking sandbox {sandbox_id} failed: {first}") from first
        log.info("sandbox %s: forked into %s", sandbox_id, ", ".join(r.id for r in made))
        return made

    # ----------------------------------------------------------------------- reconcile
    async def reconcile(self) -> None:
        """Settle every sandbox in a true state after a (possibly unclean) daemon stop."""
        sb = self.sb
        adopted: set[str] = set()
        for record in self.db.sandboxes.list(states=LIVE_STATES):
            try:
                if await self._reconcile_one(record):
                    adopted.add(record.id)
            except Exception as exc:
                log.exception("sandbox %s: reconciling failed", record.id)
                await sb.fail(record.id, f"could not be recovered after a restart: {exc}")
        for sandbox_id in await self.runtime.list_ids():
            known = self.db.sandboxes.get(sandbox_id)
            if sandbox_id in adopted or (known is not None and known.state == "parked"):
                continue
            log.warning("sandbox %s: removing orphaned runtime resources", sandbox_id)
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.destroy(sandbox_id)
        for leftover in self.work_dir.glob("*"):
            shutil.rmtree(leftover, ignore_errors=True)
        for partial in self.parked_dir.glob("*.partial"):
            shutil.rmtree(partial, ignore_errors=True)
        reap = getattr(sb.network, "reap_stale", None)
        if reap is not None:
            await reap({i for i in (sb.slot_index_of(s) for s in adopted) if i is not None})

    async def _reconcile_one(self, record: SandboxRecord) -> bool:
        """Settle one sandbox; True when it is running and re-adopted."""
        sb = self.sb
        op = record.operation
        if record.state == "creating":
            log.warning("sandbox %s: %s was interrupted; removing it", record.id, op)
            await sb.release_resources(record.id, record.slot_index)
            self.db.sandboxes.delete(record.id)
            return False
        if op == "killing":
            await sb.kill(record.id)
            return False
        if record.state == "parked":
            if not image_complete(record.image_path):
                await sb.fail(record.id, f"its parked image {record.image_path} is missing")
            else:  # a post-park clean-up that a stop cut short
                with contextlib.suppress(RuntimeFailure):
                    await self.runtime.cleanup(record.id)
            return False
        partial, final = self._park_paths(record.id)
        if op == "parking":
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
                await sb.release_resources(record.id, record.slot_index)
                self.db.sandboxes.update(
                    record.id,
                    state="parked",
                    operation=None,
                    slot_index=None,
                    image_path=str(final),
                    image_mib=image_size_mib(final),
                )
                log.info("sandbox %s: an interrupted park had finished; parked", record.id)
                return False
            shutil.rmtree(partial, ignore_errors=True)
        info = await self.runtime.info(record.id)
        alive = info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED)
        if op == "waking" and not alive:
            await sb.release_resources(record.id, record.slot_index)
            self.db.sandboxes.update(record.id, state="parked", operation=None, slot_index=None)
            log.info("sandbox %s: an interrupted wake left it parked", record.id)
            return False
        image_key = None
        if op == "waking" and record.image_path:
            image_key = sb.keys.of_image(Path(record.image_path))
        if alive:  # frozen for idleness by the daemon before
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.thaw(record.id)
        if alive and await sb.adopt(record, image_key):
            if info.status is RuntimeStatus.PAUSED:
                await self.runtime.resume(record.id)
            self.db.sandboxes.update(record.id, operation=None)
            if op == "waking" and record.image_path:
                self.sb.remove_image(record.image_path)
                self.db.sandboxes.update(record.id, image_path=None, image_mib=0)
            return True
        await sb.fail(record.id, f"its runtime was {info.status.value} when the daemon restarted")
        return False

    # ------------------------------------------------------------------------- monitor
    async def _monitor_loop(self) -> None:
        health_every = 3.0
        last_health = 0.0
        prune_every = min(60.0, max(1.0, self.settings.ended_retention_seconds / 4))
        last_prune = 0.0
        while True:
            try:
                await self._expire_and_idle()
                if time.monotonic() - last_prune >= prune_every:
                    last_prune = time.monotonic()
                    pruned = self.sb.prune_ended(time.time())
                    if pruned:
                        log.info("pruned the records of %d ended sandboxes", len(pruned))
                if time.monotonic() - last_health >= health_every:
                    last_health = time.monotonic()
                    for record in self.db.sandboxes.list(states={"running"}):
                        if self.sb.freezer.is_frozen(record.id):
                            continue  # a frozen sandbox costs nothing; its thaw checks it
                        if not record.operation and not self.sb.lock(record.id).locked():
                            await self.sb.check_alive(record)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lifecycle monitor pass failed")
            await asyncio.sleep(1.0)

    async def _expire_and_idle(self) -> None:
        now = time.time()
        for record in self.db.sandboxes.list(states=LIVE_STATES):
            if record.operation:
                continue
            expired = record.expires_at is not None and record.expires_at <= now
            if expired and record.on_timeout == "park" and record.state == "running":
                log.info("sandbox %s: TTL ran out; parking it", record.id)
                if await self._try_park(record.id):
                    self.db.sandboxes.update(record.id, expires_at=None)
                else:
                    await self.sb.kill(record.id)
            elif expired:
                log.info("sandbox %s: TTL ran out; killing it", record.id)
                await self.sb.kill(record.id)
            elif (
                record.state == "running"
                and record.auto_park_idle
                and not self.sb.in_use(record.id)
                and self.sb.last_active(record) + record.auto_park_idle <= now
            ):
                log.info("sandbox %s: idle for %ss; parking it", record.id, record.auto_park_idle)
                await self._try_park(record.id)
            elif (
                record.state == "running"
                and self.settings.freeze_idle_seconds
                and not self.sb.freezer.is_frozen(record.id)
                and self.sb.idle_for(record, self.settings.freeze_idle_seconds, now)
            ):
                await self.sb.freeze_if_idle(record)

    async def _try_park(self, sandbox_id: str) -> bool:
        try:
            await self.park(sandbox_id)
            return True
        except CorralError as exc:
            log.error("sandbox %s: automatic park failed: %s", sandbox_id, exc)
            self.sb.touch(sandbox_id)  # don't retry every second
            return False


def refuse_secrets(record: SandboxRecord, action: str) -> None:
    """Memory of a secret-bearing sandbox holds its secrets: it must not leave the sandbox."""
    if record.secret_keys:
        raise StateConflict(
            f"cannot {action} sandbox {record.id}: it holds secrets "
            f"({', '.join(record.secret_keys)}) in memory, and a {action} would copy them; "
            "create a new sandbox and give it its own secrets",
            code="secret_bearing",
        )
