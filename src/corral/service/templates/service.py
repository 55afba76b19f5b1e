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
work dirs, one per template name at a time.

The host boundary of builds (``plan``): a request names no host path. COPY reads the uploaded
``context``; ``base: upload:ID[:TAG]`` imports an uploaded image archive or OCI layout;
``docker-archive:PATH``/``oci:PATH`` host paths are allowed only inside the admin's
``import_dir``, resolved with every symlink; anything else is refused, saying to upload it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral.config import Settings
from corral.images import ImageStore
from corral.images.cas import ContentStore
from corral.images.context import ContextError, resolve_import
from corral.images.mounts import MountError, unmount
from corral.images.oci import ImageSource, parse_source
from corral.images.steps import BuildStep, DockerfileError, parse_dockerfile
from corral.service import access
from corral.service.errors import CapacityExceeded, InvalidRequest, NotFound, StateConflict
from corral.service.model import LIVE_STATES
from corral.service.templates.uploads import UploadService
from corral.storage import Database, TemplateRecord
from corral.storage.records import TemplatePin

__all__ = ["BuildRequest", "TemplateService", "canonical_name"]

log = logging.getLogger("corral.templates")

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")
_SOURCE_SCHEMES = ("docker-archive:", "oci:", "registry:")
_UPLOAD = "upload:"
_UPLOAD_HINT = (
    "the daemon reads no host path for a build: upload it instead (the CLI and the SDK upload "
    "local paths given as --dockerfile, --copy and --from docker-archive:PATH / oci:PATH; the "
    "API: POST /v1/templates/uploads?kind=context|docker-archive|oci)"
)


def canonical_name(name: str) -> str:
    """``NAME:latest`` → ``NAME``; anything else unchanged."""
    return name[: -len(":latest")] if name.endswith(":latest") else name


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"template name {name!r} is not valid: use NAME or NAME:TAG (lowercase letters, "
            "digits, '.', '_', '-'; a tag may also hold capitals)"
        )
    return canonical_name(name)


def _named_uploads(request: BuildRequest) -> builtins.list[str]:
    named = [request.context] if request.context else []
    if request.base and request.base.startswith(_UPLOAD):
        named.append(request.base[len(_UPLOAD) :].partition(":")[0])
    return named


class BuildRequest:
    """What a user asks to build (the API body, already parsed)."""

    def __init__(
        self,
        name: str,
        *,
        base: str | None = None,
        steps: builtins.list[BuildStep] | None = None,
        dockerfile: str | None = None,
        context: str | None = None,
        context_dir: str | None = None,
        build_args: dict[str, str] | None = None,
        creds: str | None = None,
        insecure: bool = False,
        cpu: float | None = None,
        memory_mib: int | None = None,
        disk_mib: int | None = None,
        max_cpu: float | None = None,
        max_memory_mib: int | None = None,
        max_disk_mib: int | None = None,
        start_cmd: builtins.list[str] | None = None,
        warmup: str | None = None,
        warm: bool = False,
        pool: int = 0,
        tags: builtins.list[str] | None = None,
        step_timeout: float | None = None,
        build_disk_mib: int | None = None,
        network: str | None = None,
        recipes: builtins.list[str] | None = None,
        shared: bool | None = None,
    ) -> None:
        self.network = network
        self.shared = shared
        self.recipes = list(recipes or [])  # templates/recipes.py: applied before the steps
        self.name = name
        self.base = base
        self.steps = list(steps or [])
        self.dockerfile = dockerfile
        self.context = context
        self.context_dir = context_dir  # refused: a host path (kept to say so clearly)
        self.build_args = dict(build_args or {})
        self.creds = creds
        self.insecure = insecure
        self.cpu = cpu
        self.memory_mib = memory_mib
        self.disk_mib = disk_mib
        self.max_cpu = max_cpu
        self.max_memory_mib = max_memory_mib
        self.max_disk_mib = max_disk_mib
        self.start_cmd = start_cmd
        self.warmup = warmup
        self.warm = warm
        self.pool = pool
        self.tags = list(tags or [])
        self.step_timeout = step_timeout
        self.build_disk_mib = build_disk_mib


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
        self.builder: object | None = None  # a TemplateBuilder, wired by the workspace
        self._store_lock = asyncio.Lock()
        self._building: dict[str, object] = {}
        self._defaults: dict[str, tuple[str | None, str | None]] = {}
        self.after_build: Callable[[TemplateRecord], object] = lambda _template: None
        # Set by the workspace: (template, owner key id, event) for each build step and end.
        self.on_build_progress: Callable[[str, str | None, dict[str, Any]], None] | None = None
        """Hook run after a build commits (warm templates and ready pools plug in here)."""

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
        """Daemon stop: cancel running builds (they clean up after themselves) and take down
        the image views. Running sandboxes keep theirs (runsc holds its own copy of the mount);
        views are mounted again on first use after the next start."""
        for handle in list(self._building.values()):
            task = getattr(handle, "task", None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
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
        live = self._db.sandboxes.list(states={"running"})
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
        self._db.templates.pin(
            TemplatePin(sandbox_id, template.name, image, template.workdir, template.user)
        )
        self._defaults[sandbox_id] = (template.workdir, template.user)

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

    # -- builds ------------------------------------------------------------------------------
    @staticmethod
    def _sharing(asked: bool | None, existing: TemplateRecord | None) -> bool:
        """Whether a built template is shared: as before for a rebuild, else an admin's are
        unless it says not and a member's are private (sharing is an admin's decision)."""
        who = access.acting()
        if asked and not who.is_admin:
            raise access.Forbidden(
                f"API key {who.name!r} may not share templates; ask an admin "
                "(`corral template share NAME`)"
            )
        if asked is not None:
            return asked
        return existing.shared if existing is not None else who.is_admin

    def plan(self, request: BuildRequest) -> object:
        """Validate ``request`` into a BuildPlan; raise InvalidRequest/NotFound before any work."""
        from corral.service.builds import BuildPlan

        name = _check_name(request.name)
        tags = [_check_name(t if ":" in t else f"{name.split(':')[0]}:{t}") for t in request.tags]
        steps = list(request.steps)
        base_text = request.base
        if request.context_dir is not None:
            raise InvalidRequest(f"build context {request.context_dir!r}: {_UPLOAD_HINT}")
        context = (
            self.uploads.get(request.context, ("context",)) if request.context is not None else None
        )
        if request.dockerfile is not None:
            try:
                parsed = parse_dockerfile(request.dockerfile, request.build_args)
            except DockerfileError as exc:
                raise InvalidRequest(str(exc)) from exc
            if base_text is not None and base_text != parsed.base:
                raise InvalidRequest(
                    f"--from {base_text} and the Dockerfile's FROM {parsed.base} disagree"
                )
            base_text = parsed.base
            steps = parsed.steps + steps
        base_text = base_text or "base"
        recipe_defaults = None
        for step in steps:
            if step.kind not in (
                "run",
                "copy",
                "env",
                "workdir",
                "user",
                "label",
                "cmd",
                "entrypoint",
            ):
                raise InvalidRequest(f"unknown build step {step.kind!r}")
        if request.recipes:
            from corral.images.host_packages import host_package_settings
            from corral.service.templates.recipes import expand

            recipe_defaults = expand(request.recipes, host_package_settings())
            steps = recipe_defaults.steps + steps + recipe_defaults.cleanup
        base = None
        source = None
        label = None
        uploads = [context.id] if context is not None else []
        if base_text.startswith(_UPLOAD):
            upload_id, _, tag = base_text[len(_UPLOAD) :].partition(":")
            image = self.uploads.get(upload_id, ("docker-archive", "oci"))
            ref = f"{image.path}:{tag}" if tag and image.kind == "oci" else str(image.path)
            source = ImageSource(image.kind, ref)
            label = f"{image.kind}:{image.label}{':' + tag if tag else ''} (uploaded)"
            uploads.append(image.id)
        elif base_text.startswith(("docker-archive:", "oci:")):
            source = self._import_source(base_text)
        elif base_text.startswith(_SOURCE_SCHEMES):
            try:
                source = parse_source(base_text, creds=request.creds, insecure=request.insecure)
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from exc
        else:
            try:
                base = self.get(base_text)
            except NotFound as exc:
                raise NotFound(
                    f"{exc.message}; to import an image use docker-archive:PATH, oci:PATH[:TAG] "
                    "or registry:HOST/NAME:TAG"
                ) from exc
        existing = self._db.templates.get(name)
        if existing is not None:
            # Rebuilding a name replaces its template: only for its owner (or an admin), who
            # keeps owning it. A member that cannot see it learns it exists, not whose it is.
            access.require_owner(existing.owner, f"template {name!r}")
        s = self._settings
        inherited = base or TemplateRecord(
            name=name,
            image="",
            cpu=s.default_cpu,
            memory_mib=s.default_memory_mib,
            disk_mib=s.default_disk_mib,
            env={},
            created_at=0.0,
        )

        def pick(value: object, fallback: object) -> object:
            return fallback if value is None else value

        if recipe_defaults is not None:  # a recipe's defaults, unless the request sets them
            inherited = replace(
                inherited,
                memory_mib=max(inherited.memory_mib, recipe_defaults.memory_mib or 0),
                start_cmd=recipe_defaults.start or inherited.start_cmd,
                warmup=recipe_defaults.warmup or inherited.warmup,
            )

        template = replace(
            inherited,
            name=name,
            cpu=float(pick(request.cpu, inherited.cpu)),  # type: ignore[arg-type]
            memory_mib=int(pick(request.memory_mib, inherited.memory_mib)),  # type: ignore[call-overload]
            disk_mib=int(pick(request.disk_mib, inherited.disk_mib)),  # type: ignore[call-overload]
            max_cpu=pick(request.max_cpu, inherited.max_cpu),  # type: ignore[arg-type]
            max_memory_mib=pick(request.max_memory_mib, inherited.max_memory_mib),  # type: ignore[arg-type]
            max_disk_mib=pick(request.max_disk_mib, inherited.max_disk_mib),  # type: ignore[arg-type]
            start_cmd=pick(request.start_cmd, inherited.start_cmd),  # type: ignore[arg-type]
            warmup=pick(request.warmup, inherited.warmup),  # type: ignore[arg-type]
            warm=request.warm or bool(recipe_defaults and recipe_defaults.warm),
            pool=request.pool,
            owner=existing.owner if existing else access.new_owner(),
            shared=self._sharing(request.shared, existing),
        )
        self._check_resources(template)
        disk = request.build_disk_mib or s.build_disk_mib
        if not 8 <= disk <= s.max_disk_mib:
            raise InvalidRequest(
                f"build disk {disk} MiB must be between 8 MiB and the workspace's ceiling of "
                f"{s.max_disk_mib} MiB"
            )
        timeout = s.build_step_timeout if request.step_timeout is None else request.step_timeout
        if timeout <= 0:
            raise InvalidRequest("step_timeout must be a positive number of seconds")
        allowed = s.allowed_network_modes
        network = request.network or ("internet" if "internet" in allowed else allowed[0])
        if network not in s.allowed_network_modes:
            raise InvalidRequest(
                f"network mode {network!r} is not allowed in this workspace (allowed: "
                f"{', '.join(s.allowed_network_modes)}); build with --network MODE"
            )
        builder = self.builder
        resources = getattr(builder, "resources", None)
        return BuildPlan(
            template=template,
            steps=steps,
            base=base,
            source=source,
            source_label=label,
            context=context.path if context is not None else None,
            tags=[t for t in tags if t != name],
            build_args=dict(request.build_args),
            resources=resources(disk) if resources is not None else None,
            step_timeout=float(timeout),
            network=network,
            uploads=uploads,
        )

    def _import_source(self, text: str) -> ImageSource:
        """A docker-archive:/oci: host path: allowed only inside the admin's import dir."""
        kind, _, ref = text.partition(":")
        path, _, tag = ref.partition(":") if kind == "oci" else (ref, "", "")
        import_dir = self._settings.import_dir
        if import_dir is None or not path.startswith("/"):
            where = "" if import_dir is None else f" (only paths in {import_dir} may be named)"
            raise InvalidRequest(f"image source {text!r}: {_UPLOAD_HINT}{where}")
        try:
            resolved = resolve_import(import_dir, path)
        except ContextError as exc:
            raise InvalidRequest(f"image source {text!r}: {exc}; {_UPLOAD_HINT}") from exc
        return ImageSource(kind, f"{resolved}:{tag}" if tag else str(resolved))

    def _check_resources(self, t: TemplateRecord) -> None:
        s = self._settings
        problems = []
        for what, value, ceiling, unit in (
            ("cpu", t.cpu, t.max_cpu, "vCPUs"),
            ("memory", t.memory_mib, t.max_memory_mib, "MiB"),
            ("disk", t.disk_mib, t.max_disk_mib, "MiB"),
        ):
            workspace = {"cpu": s.max_cpu, "memory": s.max_memory_mib, "disk": s.max_disk_mib}[what]
            if value <= 0:
                problems.append(f"default {what} must be positive")
            if ceiling is not None and ceiling > workspace:
                problems.append(
                    f"max {what} {ceiling:g} {unit} is over the workspace's ceiling of "
                    f"{workspace:g} {unit}"
                )
            if ceiling is not None and value > ceiling:
                problems.append(f"default {what} {value:g} {unit} is over max {what} {ceiling:g}")
        if t.pool < 0:
            problems.append("pool must be 0 or more")
        if problems:
            raise InvalidRequest(f"template {t.name!r}: " + "; ".join(problems))

    async def start_build(self, request: BuildRequest) -> object:
        """Validate ``request``, admit its build sandbox against the workspace's capacity, take
        over its uploads, and start the build in the background; returns its BuildHandle (whose
        events the caller streams). Raises before starting if the request is wrong or does not
        fit."""
        from corral.service.builds import BuildHandle, BuildPlan, TemplateBuilder

        try:
            plan = self.plan(request)
        except BaseException:
            self.uploads.discard(_named_uploads(request))
            raise
        assert isinstance(plan, BuildPlan)
        builder = self.builder
        if not isinstance(builder, TemplateBuilder):
            raise StateConflict("this workspace cannot build templates (no builder wired)")
        name = plan.template.name
        running = self._building.get(name)
        task = getattr(running, "task", None)
        if getattr(running, "finished", False) and task is not None:
            # It has reported its end and is cleaning up: that is not worth a refusal.
            with contextlib.suppress(BaseException):
                await asyncio.shield(task)
            running = self._building.get(name)
        if running is not None:
            self.uploads.discard(plan.uploads)
            raise StateConflict(f"template {name!r} is already being built")
        self._building[name] = plan  # taken while admission waits
        try:
            await builder.admit(plan)
        except BaseException:
            self._building.pop(name, None)
            self.uploads.discard(plan.uploads)
            raise
        try:
            for upload_id in plan.uploads:
                plan.owned.append(self.uploads.claim(upload_id).dir)
            handle = BuildHandle(name, self.log_path(name), self._settings.build_log_max_kib * 1024)
            progress = self.on_build_progress
            if progress is not None:
                owner = access.new_owner()
                handle.on_progress = lambda event: progress(name, owner, event)
        except BaseException:
            builder.release(plan)
            for owned in plan.owned:
                shutil.rmtree(owned, ignore_errors=True)
            self._building.pop(name, None)
            raise
        self._building[name] = handle

        async def run() -> None:
            try:
                template = await builder.run(plan, handle, self._commit)
                if template is not None:
                    self.after_build(template)
            finally:
                self._building.pop(name, None)

        task = asyncio.get_running_loop().create_task(run(), name=f"build-{name}")
        handle.task = task  # type: ignore[attr-defined]
        return handle

    async def _commit(self, records: builtins.list[TemplateRecord], image_id: str) -> None:
        async with self._store_lock:
            self._db.templates.put(*records)
        await self.gc()

    def log_path(self, name: str) -> Path:
        safe = canonical_name(name).replace(":", "@").replace("/", "_")
        return self._settings.data_dir / "build-logs" / f"{safe}.ndjson"

    def logs(self, name: str) -> Path:
        record = self._db.templates.get(canonical_name(name))
        if record is not None and not access.visible(record.owner, shared=record.shared):
            raise NotFound(f"template {name!r} has no build log")
        path = self.log_path(name)
        if not path.is_file():
            raise NotFound(f"template {name!r} has no build log")
        return path

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
