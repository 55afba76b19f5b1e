"""Templates: named images with defaults and ceilings; builds, tags, removal and image GC.

A template name is ``NAME`` or ``NAME:TAG``; ``NAME:latest`` and ``NAME`` are the same template
(stored as ``NAME``). Every tag is its own record pointing at an image, so tagging costs nothing
(images are content-addressed, see ``images/cas.py``) and removing a tag removes only it.

Invariants:
- a template record exists only for a complete image (builds commit at their very end);
- a sandbox is pinned to the image it was made from for as long as it lives (``pin``), so a
  rebuilt tag or a removed template never pulls the image from under it; GC keeps every image a
  template or a live sandbox's pin names, and the prebuilt images of ``ImageStore``;
- ``delete`` refuses while live sandboxes or snapshots use the template, and names them.

Locking: ``_store_lock`` serializes commits, deletions and GC; builds run concurrently in their own
work dirs, one per template name at a time (``builds/service.py``).

Builds (``builds/``) commit their records here (``commit``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from corral.config import Settings
from corral.images import ImageStore
from corral.images.cas import ContentStore
from corral.images.mounts import MountError, unmount
from corral.service import access
from corral.service.errors import CapacityExceeded, InvalidRequest, NotFound, StateConflict
from corral.service.model import LIVE_STATES, SandboxState
from corral.service.templates.uploads import UploadService
from corral.storage import Database, TemplateRecord
from corral.storage.records import TemplatePin

__all__ = ["TemplateService", "canonical_name", "check_name"]

log = logging.getLogger("corral.templates")

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")


def canonical_name(name: str) -> str:
    """``NAME:latest`` → ``NAME``; anything else unchanged."""
    return name[: -len(":latest")] if name.endswith(":latest") else name


def check_name(name: str) -> str:
    """A valid template name, canonical (InvalidRequest naming the rules otherwise)."""
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"template name {name!r} is not valid: use NAME or NAME:TAG (lowercase letters, "
            "digits, '.', '_', '-'; a tag may also hold capitals)"
        )
    return canonical_name(name)


class TemplateService:
    """Keeps the template table, the image store and the sandboxes' pins in step."""

    def __init__(
        self,
        db: Database,
        images: ImageStore,
        settings: Settings,
        store: ContentStore | None = None,
    ) -> None:
        self._db = db
        self._images = images
        self._settings = settings
        self.store = store or ContentStore(settings.data_dir / "store", images)
        self.uploads = UploadService(settings)
        self._store_lock = asyncio.Lock()
        self._defaults: dict[str, tuple[str | None, str | None]] = {}

    # -- start -------------------------------------------------------------------------------
    def sync(self) -> None:
        """Open the store (clearing interrupted work) and register every prebuilt image as a
        template of the same name if none exists yet."""
        # A build the previous daemon was running when it died may have left its root view and
        # its disk mounted: detach them before the store clears its work dirs.
        for leftover in self.store.tmp_dir.glob(".build-*"):
            for mount in (leftover / "root", leftover / "disk"):
                with contextlib.suppress(MountError):
                    unmount(mount)
        self.store.open()
        self.uploads.start()
        for name in self._images.names():
            if self._db.templates.get(name) is None:
                self._db.templates.put(
                    TemplateRecord(
                        name=name,
                        image=name,
                        cpu=self._settings.default_cpu,
                        memory_mib=self._settings.default_memory_mib,
                        disk_mib=self._settings.default_disk_mib,
                        env={},
                        created_at=time.time(),
                        source="prebuilt",
                    )
                )

    async def close(self) -> None:
        """Daemon stop: take down the image views. Running sandboxes keep theirs (runsc holds its
        own copy of the mount); views are mounted again on first use after the next start. Stop
        the builds first (``BuildService.close``)."""
        await asyncio.to_thread(self.store.unmount_all)

    # -- queries -----------------------------------------------------------------------------
    def list(self) -> builtins.list[TemplateRecord]:
        """The templates the acting key may use: its own and the shared ones (all, for admins
        and viewers)."""
        return [t for t in self._db.templates.list() if access.visible(t.owner, shared=t.shared)]

    def get(self, name: str) -> TemplateRecord:
        record = self._db.templates.get(canonical_name(name))
        if record is None or not access.visible(record.owner, shared=record.shared):
            known = ", ".join(t.name for t in self.list()) or "none"
            raise NotFound(f"template {name!r} not found (known templates: {known})")
        return record

    def stored(self, name: str) -> TemplateRecord | None:
        """The record of ``name`` whoever may see it (for the checks that must know whether a
        name is taken), or None."""
        return self._db.templates.get(canonical_name(name))

    def set_shared(self, name: str, shared: bool) -> TemplateRecord:
        """Mark a template (one tag) shared with every member, or private to its owner."""
        record = self.get(name)
        access.require_owner(record.owner, f"template {record.name!r}")
        updated = replace(record, shared=shared)
        self._db.templates.put(updated)
        return updated

    def rootfs(self, template: TemplateRecord) -> Path:
        """The read-only root of the template's image (its view is mounted on first use)."""
        return self._image_rootfs(template.image, template.name)

    def _image_rootfs(self, image: str, template_name: str) -> Path:
        if image.startswith("sha256:"):
            try:
                return self.store.rootfs(image)
            except (FileNotFoundError, OSError) as exc:
                raise NotFound(
                    f"image {image[:19]} of template {template_name!r} is not usable: {exc}"
                ) from exc
        rootfs = self._images.rootfs(image)
        if rootfs is None:
            raise NotFound(
                f"image {image!r} of template {template_name!r} is missing from "
                f"{self._images.images_dir}; run ./scripts/setup to build it"
            )
        return rootfs

    def visible_users(self, name: str) -> builtins.list[str]:
        """``users`` that the acting key may see (a member: its own)."""
        name = canonical_name(name)
        return [
            r.id
            for r in self._db.sandboxes.list(states=LIVE_STATES)
            if r.template == name and not r.pooled and access.visible(r.owner)
        ]

    def owned(self, name: str) -> TemplateRecord:
        """The template, if the acting key may change it (its owner, or an admin)."""
        record = self.get(name)
        access.require_owner(record.owner, f"template {record.name!r}")
        return record

    def users(self, name: str) -> builtins.list[str]:
        """Ids of the live sandboxes made from template ``name``."""
        name = canonical_name(name)
        return [
            r.id
            for r in self._db.sandboxes.list(states=LIVE_STATES)
            if r.template == name and not r.pooled
        ]

    def pooled_count(self, name: str) -> int:
        """Ready sandboxes waiting in the template's pool."""
        name = canonical_name(name)
        live = self._db.sandboxes.list(states={SandboxState.RUNNING})
        return sum(1 for r in live if r.template == name and r.pooled and not r.operation)

    # -- sandboxes ---------------------------------------------------------------------------
    def check_ceilings(
        self, template: TemplateRecord, *, cpu: float, memory_mib: int, disk_mib: int
    ) -> None:
        """Raise CapacityExceeded naming each of the template's ceilings the request is over."""
        over = []
        if template.max_cpu is not None and cpu > template.max_cpu:
            over.append(
                f"cpu {cpu:g} is over the template's ceiling of {template.max_cpu:g} vCPUs "
                f"by {cpu - template.max_cpu:g}"
            )
        if template.max_memory_mib is not None and memory_mib > template.max_memory_mib:
            over.append(
                f"memory {memory_mib} MiB is over the template's ceiling of "
                f"{template.max_memory_mib} MiB by {memory_mib - template.max_memory_mib} MiB"
            )
        if template.max_disk_mib is not None and disk_mib > template.max_disk_mib:
            over.append(
                f"disk {disk_mib} MiB is over the template's ceiling of "
                f"{template.max_disk_mib} MiB by {disk_mib - template.max_disk_mib} MiB"
            )
        if over:
            raise CapacityExceeded(f"template {template.name!r}: " + "; ".join(over))

    def pin_image(self, sandbox_id: str, template: TemplateRecord, image: str) -> None:
        """Record that ``sandbox_id`` runs on ``image`` of ``template`` with its exec defaults
        (forks and restored snapshots keep the image their memory was taken on, even if the tag
        has been rebuilt since)."""
        self.pin_images([sandbox_id], template, image)

    def pin_images(self, sandbox_ids: Sequence[str], template: TemplateRecord, image: str) -> None:
        """``pin_image`` of several sandboxes (a fork's children) in one commit."""
        pins = self.pins_for(sandbox_ids, template, image)
        self._db.templates.pin(*pins)
        self.pinned(pins)

    def pins_for(
        self, sandbox_ids: Sequence[str], template: TemplateRecord, image: str
    ) -> builtins.list[TemplatePin]:
        """The pins ``pin_images`` would record, for a caller that commits them with the
        sandboxes' records (``Admission.admit``); tell ``pinned`` once they are."""
        return [
            TemplatePin(sandbox_id, template.name, image, template.workdir, template.user)
            for sandbox_id in sandbox_ids
        ]

    def pinned(self, pins: Sequence[TemplatePin]) -> None:
        """``pins`` are recorded: their sandboxes' exec defaults are known from now on."""
        for pin in pins:
            self._defaults[pin.sandbox_id] = (pin.workdir, pin.user)

    async def record_warm_image(self, names: builtins.list[str], seal: Callable[[], Path]) -> None:
        """Seal a warm template's memory image and record it on the template's tags, under the
        store lock so that a concurrent GC never sees it unreferenced."""
        async with self._store_lock:
            path = await asyncio.to_thread(seal)
            for name in names:
                record = self._db.templates.get(name)
                if record is not None:
                    self._db.templates.put(replace(record, warm_image=str(path)))

    def image_of(self, sandbox_id: str) -> str | None:
        pin = self._db.templates.get_pin(sandbox_id)
        return None if pin is None else pin.image

    def image_rootfs(self, image: str, template_name: str) -> Path:
        return self._image_rootfs(image, template_name)

    def rootfs_for(self, sandbox_id: str) -> Path | None:
        """The root of the image ``sandbox_id`` was made from (for wake, fork and restore), or
        None if it was never pinned."""
        pin = self._db.templates.get_pin(sandbox_id)
        return None if pin is None else self._image_rootfs(pin.image, pin.template)

    def exec_defaults(self, sandbox_id: str) -> tuple[str | None, str | None]:
        """(workdir, user) that processes of ``sandbox_id`` get unless they ask otherwise."""
        found = self._defaults.get(sandbox_id)
        if found is None:
            pin = self._db.templates.get_pin(sandbox_id)
            if pin is not None:
                found = (pin.workdir, pin.user)
            else:
                record = self._db.sandboxes.get(sandbox_id)
                template = self._db.templates.get(record.template) if record else None
                found = (template.workdir, template.user) if template else (None, None)
            self._defaults[sandbox_id] = found
        return found

    # -- removal and GC ----------------------------------------------------------------------
    async def delete(self, name: str) -> None:
        """Remove template ``name`` (one tag); refuses while sandboxes or snapshots use it."""
        async with self._store_lock:
            record = self.get(name)
            access.require_owner(record.owner, f"template {record.name!r}")
            users = self.users(record.name)
            if users:
                raise StateConflict(
                    f"template {record.name!r} is used by {len(users)} live sandbox(es): "
                    f"{', '.join(users)}; kill them first"
                )
            snapshots = getattr(self._db, "snapshots", None)
            if snapshots is not None:
                using = [s.name for s in snapshots.list() if s.template == record.name]
                if using:
                    raise StateConflict(
                        f"template {record.name!r} is used by snapshot(s) {', '.join(using)}; "
                        "delete them first"
                    )
            self._db.templates.delete(record.name)
        await self.gc()

    async def commit(self, records: builtins.list[TemplateRecord]) -> None:
        """Make a build's records visible at once, then collect what they replaced."""
        async with self._store_lock:
            self._db.templates.put(*records)
        await self.gc()

    async def forget(self, names: builtins.list[str]) -> None:
        """Remove just-committed records again (a warm build whose warmup failed)."""
        async with self._store_lock:
            for name in names:
                self._db.templates.delete(name)
        await self.gc()

    async def gc(self) -> tuple[builtins.list[str], builtins.list[str]]:
        """Delete images and layers no template and no live sandbox uses."""
        async with self._store_lock:
            live = {r.id for r in self._db.sandboxes.list(states=LIVE_STATES)}
            pins = self._db.templates.pins()
            self._db.templates.unpin([p.sandbox_id for p in pins if p.sandbox_id not in live])
            for sandbox_id in list(self._defaults):
                if sandbox_id not in live:
                    self._defaults.pop(sandbox_id, None)
            templates = self._db.templates.list()
            keep = {t.image for t in templates}
            keep |= {p.image for p in pins if p.sandbox_id in live}
            snapshots = getattr(self._db, "snapshots", None)
            if snapshots is not None:
                keep |= {s.image for s in snapshots.list() if s.image}
            warm_dir = self._settings.data_dir / "warm"
            if warm_dir.is_dir():
                wanted = {t.warm_image for t in templates if t.warm_image}
                for path in warm_dir.iterdir():
                    if str(path) not in wanted:
                        await asyncio.to_thread(shutil.rmtree, path, True)
            images, layers = await asyncio.to_thread(self.store.gc, keep)
        if images or layers:
            log.info("image gc: removed %d image(s), %d layer(s)", len(images), len(layers))
        return images, layers
