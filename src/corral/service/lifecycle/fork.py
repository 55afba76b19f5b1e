"""Fork: N new sandboxes that continue from a running sandbox's current state, processes
included. The source is checkpointed with ``--leave-running`` (it runs on) and the image is
restored into each child, at most ``FORK_CONCURRENCY`` at a time.

All or nothing: the children are admitted together before the checkpoint, and a fork that made
only some copies removes them all. A kill of the source during a fork waits for the checkpoint
and then kills only the source. ``reconcile.py`` removes the children of an interrupted fork.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time

from corral.config import Settings
from corral.paths import inside
from corral.runtime.base import RuntimeFailure
from corral.service.crash import crash_point
from corral.service.errors import CorralError, InvalidRequest, OperationFailed
from corral.service.images import work_dir
from corral.service.launch import Launcher
from corral.service.model import (
    Action,
    CreateRequest,
    Operation,
    SandboxState,
    new_sandbox_id,
    refuse_secrets,
    require_state,
)
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.sandboxes.policy import NetworkPolicies
from corral.service.secrets import SecretService
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord
from corral.timing import phase

__all__ = ["FORK_CONCURRENCY", "MAX_FORK", "ForkService"]

log = logging.getLogger("corral.lifecycle")

MAX_FORK = 64
FORK_CONCURRENCY = 4


class ForkService:
    """Forks running sandboxes (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        templates: TemplateService,
        sandboxes: SandboxService,
        live: LiveSandboxes,
        admission: Admission,
        policies: NetworkPolicies,
        launcher: Launcher,
        secrets: SecretService | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.templates = templates
        self.sandboxes = sandboxes
        self.live = live
        self.admission = admission
        self.policies = policies
        self.launcher = launcher
        self.secrets = secrets
        self.work_dir = work_dir(settings)

    async def fork(self, sandbox_id: str, count: int) -> list[SandboxRecord]:
        """N new sandboxes continuing from the source's current state; the source runs on."""
        if not 1 <= count <= MAX_FORK:
            raise InvalidRequest(f"fork count must be 1..{MAX_FORK}, got {count}")
        self.admission.workspace_policy.check_forks(count)
        image = inside(self.work_dir, f"fork-{sandbox_id}-{new_sandbox_id()[3:]}")
        async with self.sandboxes.lock(sandbox_id):
            source = self.sandboxes.get(sandbox_id)
            require_state(source, Action.FORK)
            refuse_secrets(source, "fork")
            await self.sandboxes.thaw(sandbox_id)
            ttl = (source.expires_at - source.created_at) if source.expires_at else None
            like_source = CreateRequest(
                template=source.template,
                metadata=dict(source.metadata),
                on_timeout=source.on_timeout,
                auto_park_idle=source.auto_park_idle,
                auto_wake=source.auto_wake,
            )
            children = [
                self.launcher.new_record(
                    like_source,
                    source.template,
                    (source.cpu, source.memory_mib, source.disk_mib),
                    time.time() + ttl if ttl else None,
                    env=dict(source.env),
                    operation=Operation.FORKING,
                    parent_id=source.id,
                    network=source.network or self.policies.of(source).dumps(),
                )
                for _ in range(count)
            ]
            with phase("admit"):
                await self.admission.admit(children)
            if self.secrets is not None:
                for child in children:  # their memory holds the parent's placeholders
                    self.secrets.inherit(child.id, source.id)
            self.db.sandboxes.update(sandbox_id, operation=Operation.FORKING)
            # The children's slots are built while the source is checkpointed.
            self.live.network.build_ahead(count)
            try:
                crash_point(self.settings, "fork:before-checkpoint")
                # Not fsynced: a scratch image (the work dir is emptied at every start) that
                # only this fork's restores read, from the page cache. A crash ends the fork
                # whatever the image holds (reconcile removes its children), so making it
                # durable would protect nothing.
                await self.live.checkpoint(sandbox_id, image, leave_running=True, durable=False)
            except BaseException as exc:
                self.live.network.build_ahead(-count)  # no child will lease a slot
                for child in children:
                    self.db.sandboxes.delete(child.id)
                    if self.secrets is not None:
                        self.secrets.forget(child.id)
                await asyncio.to_thread(shutil.rmtree, image, True)
                if isinstance(exc, RuntimeFailure):
                    raise OperationFailed(f"forking sandbox {sandbox_id} failed: {exc}") from exc
                raise
            finally:
                with contextlib.suppress(KeyError):
                    self.db.sandboxes.update(sandbox_id, operation=None)
        crash_point(self.settings, "fork:after-checkpoint")
        results: list[SandboxRecord | BaseException] = []
        try:
            rootfs = self.sandboxes.rootfs_of(source)
            template = self.templates.get(source.template)
            image_ref = self.templates.image_of(source.id) or template.image
            self.templates.pin_images([child.id for child in children], template, image_ref)
            limit = asyncio.Semaphore(FORK_CONCURRENCY)

            async def restore(child: SandboxRecord) -> SandboxRecord:
                async with limit, self.sandboxes.lock(child.id):
                    await self.live.boot(child, rootfs, child.env, image_dir=image)
                    return self.db.sandboxes.update(
                        child.id,
                        state=SandboxState.RUNNING,
                        operation=None,
                        slot_index=self.live.slot_index_of(child.id),
                    )

            results = list(
                await asyncio.gather(
                    *(restore(child) for child in children), return_exceptions=True
                )
            )
        except BaseException as exc:
            results = [exc]
        finally:
            with phase("image remove"):
                await asyncio.to_thread(shutil.rmtree, image, True)
        made = [r for r in results if isinstance(r, SandboxRecord)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            # All or nothing: a fork that made only some copies would surprise its caller.
            for record in made:
                await self.live.release_resources(record.id, record.slot_index)
            for child in children:
                self.db.sandboxes.delete(child.id)
                if self.secrets is not None:
                    self.secrets.forget(child.id)
            first = failed[0]
            if isinstance(first, CorralError):
                raise first
            raise OperationFailed(f"forking sandbox {sandbox_id} failed: {first}") from first
        log.info("sandbox %s: forked into %s", sandbox_id, ", ".join(r.id for r in made))
        return made
