"""Snapshots: saved sandbox states that new sandboxes restore from, any number of times.

A ``memory`` snapshot is a runtime checkpoint taken with the sandbox left running: sandboxes
restored from it continue with its processes. An ``fs`` snapshot holds only files: those changed
since the template's image was made (a tar made inside the sandbox) and the list of the image's
paths that were deleted; restoring boots the template fresh and applies both (``files.py``).

Images live in ``<data>/snapshots/<name>``, written as ``<name>.partial`` and sealed (see
``images.seal_image``); a record stays ``creating`` until its image is sealed, so a crash never
leaves a snapshot that looks usable but is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import time
from pathlib import Path

from corral.config import Settings
from corral.paths import PathEscape, inside
from corral.runtime.base import Runtime, RuntimeFailure
from corral.runtime.writeback import writing_back
from corral.service import access
from corral.service.crash import crash_point
from corral.service.create import SandboxCreator
from corral.service.errors import (
    CapacityExceeded,
    InvalidRequest,
    NotFound,
    OperationFailed,
    StateConflict,
)
from corral.service.images import (
    files_mib,
    host_free_mib,
    image_complete,
    image_size_mib,
    seal_image,
)
from corral.service.launch import Launcher
from corral.service.model import (
    Action,
    CreateRequest,
    Operation,
    SandboxState,
    refuse_secrets,
    require_state,
)
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.sandboxes.policy import NetworkPolicies
from corral.service.secrets import SNAPSHOT_OWNER, SecretService
from corral.service.snapshots.files import FileSnapshots
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord, SnapshotRecord
from corral.timing import phase

log = logging.getLogger("corral.snapshots")

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def snapshot_owner(name: str) -> str:
    """Who holds a memory snapshot's brokered-secret bindings (``secrets.inherit``) until a
    sandbox restored from it takes them over."""
    return SNAPSHOT_OWNER + name


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InvalidRequest(
            f"snapshot name {name!r} is not valid: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class SnapshotService:
    """Takes, lists, restores and removes snapshots (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        templates: TemplateService,
        sandboxes: SandboxService,
        live: LiveSandboxes,
        admission: Admission,
        policies: NetworkPolicies,
        launcher: Launcher,
        creator: SandboxCreator,
        secrets: SecretService | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.runtime = runtime
        self.templates = templates
        self.sandboxes = sandboxes
        self.live = live
        self.admission = admission
        self.policies = policies
        self.launcher = launcher
        self.creator = creator
        self.secrets = secrets
        self.dir = settings.data_dir / "snapshots"
        self.files = FileSnapshots(settings, sandboxes, live)

    async def start(self) -> None:
        """Drop snapshots whose image was never sealed (a crash while snapshotting)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for record in self.db.snapshots.list():
            if record.state != "ready" or not image_complete(record.image_path):
                log.warning("snapshot %s: incomplete after a restart; removing it", record.name)
                self._remove_image(record.image_path)
                self.db.snapshots.delete(record.name)
        for partial in self.dir.glob("*.partial"):
            self._remove_image(partial)

    def _remove_image(self, image_path: Path | str) -> None:
        """Remove a snapshot image, only if it lies inside the snapshots dir."""
        try:
            target = inside(self.dir, image_path)
        except PathEscape as exc:
            log.error("not removing snapshot image %s: %s", image_path, exc)
            return
        shutil.rmtree(target, ignore_errors=True)

    def list(self) -> list[SnapshotRecord]:
        """The ready snapshots the acting key may see."""
        return [
            s for s in self.db.snapshots.list() if s.state == "ready" and access.visible(s.owner)
        ]

    def get(self, name: str) -> SnapshotRecord:
        record = self.db.snapshots.get(name)
        missing = f"snapshot {name!r} not found"
        if record is None or record.state != "ready":
            raise NotFound(missing)
        access.hide(record.owner, missing)
        return record

    async def remove(self, name: str) -> None:
        record = self.get(name)
        self.db.snapshots.delete(name)
        if self.secrets is not None:
            self.secrets.forget(snapshot_owner(name))
        await asyncio.to_thread(self._remove_image, record.image_path)

    # ---------------------------------------------------------------------------- take
    async def take(
        self, sandbox_id: str, name: str, *, fs_only: bool = False, allow_secrets: bool = False
    ) -> SnapshotRecord:
        check_name(name)
        async with self.sandboxes.lock(sandbox_id):
            source = self.sandboxes.get(sandbox_id)
            require_state(source, Action.SNAPSHOT)
            await self.sandboxes.thaw(sandbox_id)
            if not fs_only:
                refuse_secrets(source, "memory snapshot")
            elif source.secret_keys and not allow_secrets:
                raise StateConflict(
                    f"sandbox {sandbox_id} holds secrets ({', '.join(source.secret_keys)}); its "
                    "files may contain them too. Pass allow_secrets (--allow-secrets) to take a "
                    "filesystem-only snapshot anyway",
                    code="secret_bearing",
                )
            if self.db.snapshots.get(name) is not None:
                raise StateConflict(f"snapshot {name!r} already exists; remove it or pick another")
            with phase("space check"):
                await self._check_space(source, fs_only)
            partial, final = inside(self.dir, f"{name}.partial"), inside(self.dir, name)
            self._remove_image(partial)
            template = self.templates.get(source.template)
            record = SnapshotRecord(
                name=name,
                state=SandboxState.CREATING,
                kind="fs" if fs_only else "memory",
                source_id=source.id,
                template=source.template,
                cpu=source.cpu,
                memory_mib=source.memory_mib,
                disk_mib=source.disk_mib,
                env=dict(source.env),
                image_path=str(final),
                created_at=time.time(),
                image=self.templates.image_of(source.id) or template.image,
                owner=access.new_owner(),
            )
            self.db.snapshots.add(record)
            self.db.sandboxes.update(sandbox_id, operation=Operation.SNAPSHOTTING)
            try:
                if fs_only:
                    await self.files.capture(source, partial)
                else:
                    crash_point(self.settings, "snapshot:before-checkpoint")
                    # fsynced when sealed, with the marker; written back as it is written
                    async with writing_back(partial):
                        await self.live.checkpoint(
                            sandbox_id, partial, leave_running=True, durable=False
                        )
                crash_point(self.settings, "snapshot:after-checkpoint")
                await asyncio.to_thread(seal_image, partial, final, root=self.dir, sync_tree=True)
            except BaseException as exc:
                self._remove_image(partial)
                self.db.snapshots.delete(name)
                if isinstance(exc, RuntimeFailure):
                    raise OperationFailed(f"snapshotting sandbox {sandbox_id}: {exc}") from exc
                raise
            finally:
                with contextlib.suppress(KeyError):
                    self.db.sandboxes.update(sandbox_id, operation=None)
            if not fs_only and self.secrets is not None:
                # Its memory holds the source's placeholders: what it restores into gets them.
                self.secrets.inherit(snapshot_owner(name), sandbox_id)
            size = await asyncio.to_thread(image_size_mib, final)
            log.info(
                "sandbox %s: snapshot %s taken (%s, %d MiB)", sandbox_id, name, record.kind, size
            )
            return self.db.snapshots.update(name, state="ready", size_mib=size)

    async def _check_space(self, source: SandboxRecord, fs_only: bool) -> None:
        used = await files_mib(self.runtime, source)
        estimate = used if fs_only else source.memory_mib + used
        free = min(host_free_mib(self.dir), int(self.admission.capacity().disk.free))
        if estimate > free:
            raise CapacityExceeded(
                f"cannot snapshot sandbox {source.id}: the image may take up to {estimate} MiB "
                f"of disk and only {free} MiB is free"
            )

    # ------------------------------------------------------------------------- restore
    async def restore(self, name: str, request: CreateRequest) -> SandboxRecord:
        """A new sandbox from a snapshot. A memory snapshot keeps its resources (its processes
        were sized for them); cpu may be changed, and metadata, ttl and lifecycle options apply."""
        snapshot = self.get(name)
        if snapshot.kind == "fs":
            request.template = snapshot.template
            request.env = {**snapshot.env, **request.env}
            request.memory_mib = request.memory_mib or snapshot.memory_mib
            request.disk_mib = request.disk_mib or snapshot.disk_mib
            record = await self.creator.create(request)
            try:
                await self.files.apply(record, inside(self.dir, snapshot.image_path))
            except BaseException:
                await self.sandboxes.kill(record.id)
                raise
            return self.sandboxes.get(record.id)
        request.template = snapshot.template
        if request.memory_mib not in (None, snapshot.memory_mib):
            raise InvalidRequest(
                f"snapshot {name!r} holds a memory image of a {snapshot.memory_mib} MiB sandbox; "
                "its memory cannot be changed"
            )
        if request.disk_mib not in (None, snapshot.disk_mib):
            raise InvalidRequest(
                f"snapshot {name!r} holds a memory image of a sandbox with a {snapshot.disk_mib} "
                "MiB disk (its root's size is in that memory); its disk cannot be changed"
            )
        request.memory_mib = snapshot.memory_mib
        request.disk_mib = snapshot.disk_mib
        request.cpu = request.cpu or snapshot.cpu
        if request.secret_env:
            raise InvalidRequest("secret env cannot be given to a sandbox restored from memory")
        source = self.db.sandboxes.get(snapshot.source_id) if snapshot.source_id else None
        if source is not None and request.network is None and not (request.allow or request.deny):
            stored = self.policies.of(source).to_json()  # the source's rules come back with it
            request.network, request.allow, request.deny = (
                stored["mode"],
                stored["allow"],
                stored["deny"],
            )
        cpu, memory, disk, expires = self.admission.resolve(request)
        record = self.launcher.new_record(
            request,
            snapshot.template,
            (cpu, memory, disk),
            expires,
            env={**snapshot.env, **request.env},
            operation=Operation.RESTORING,
            parent_id=snapshot.source_id,
        )
        template = self.templates.get(snapshot.template)
        secrets = self.secrets
        if secrets is not None:
            secrets.inherit(record.id, snapshot_owner(name))
        try:
            return await self.launcher.launch(
                record,
                template,
                image=snapshot.image or template.image,
                env=record.env,
                image_dir=inside(self.dir, snapshot.image_path),
                configure=bool(request.env),
            )
        except BaseException:
            if secrets is not None:
                secrets.forget(record.id)
            raise
