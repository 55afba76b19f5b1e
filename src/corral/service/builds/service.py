"""Builds as a service: validate a build request into a plan (the host boundary: a request names
no host path), admit its build sandbox, run it in the background (``builder.py``), commit the
new template, warm it if asked, refresh its ready pool; and the builds' logs.

The host boundary (``plan``): COPY reads the uploaded ``context``; ``base: upload:ID[:TAG]``
imports an uploaded image archive or OCI layout; ``docker-archive:PATH``/``oci:PATH`` host paths
are allowed only inside the admin's ``import_dir``, resolved with every symlink; anything else is
refused, saying to upload it.

Concurrency: one build per template name at a time (``_building``: the plan while its admission
waits, then its handle); builds of different names run concurrently in their own work dirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from corral.config import Settings
from corral.images.context import ContextError, resolve_import
from corral.images.host_packages import host_package_settings
from corral.images.oci import ImageSource, parse_source
from corral.images.steps import DockerfileError, parse_dockerfile
from corral.service import access
from corral.service.builds.builder import TemplateBuilder
from corral.service.builds.log import BuildHandle
from corral.service.builds.plan import BuildFailed, BuildPlan, BuildRequest
from corral.service.errors import InvalidRequest, NotFound, StateConflict
from corral.service.pools import PoolService
from corral.service.templates import TemplateService, canonical_name
from corral.service.templates.recipes import expand
from corral.service.templates.service import check_name
from corral.service.warm import WarmService
from corral.storage import TemplateRecord

__all__ = ["BuildService"]

Emit = Callable[[dict[str, Any]], Awaitable[None]]
BuildProgress = Callable[[str, str | None, dict[str, Any]], None]
_SOURCE_SCHEMES = ("docker-archive:", "oci:", "registry:")
_UPLOAD = "upload:"
_UPLOAD_HINT = (
    "the daemon reads no host path for a build: upload it instead (the CLI and the SDK upload "
    "local paths given as --dockerfile, --copy and --from docker-archive:PATH / oci:PATH; the "
    "API: POST /v1/templates/uploads?kind=context|docker-archive|oci)"
)


def _named_uploads(request: BuildRequest) -> list[str]:
    named = [request.context] if request.context else []
    if request.base and request.base.startswith(_UPLOAD):
        named.append(request.base[len(_UPLOAD) :].partition(":")[0])
    return named


T = TypeVar("T")


def pick(value: T | None, fallback: T) -> T:
    """What the request asks, else what the template inherits."""
    return fallback if value is None else value


class BuildService:
    """Runs template builds (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        templates: TemplateService,
        builder: TemplateBuilder,
        warm: WarmService,
        pools: PoolService,
        on_progress: BuildProgress | None = None,
    ) -> None:
        self.settings = settings
        self.templates = templates
        self.uploads = templates.uploads
        self.builder = builder
        self.warm = warm
        self.pools = pools
        # (template, owner key id, event) for each build step and end: the workspace's events.
        self.on_progress = on_progress
        self._building: dict[str, BuildPlan | BuildHandle] = {}

    async def close(self) -> None:
        """Daemon stop: cancel running builds (they clean up after themselves)."""
        for handle in list(self._building.values()):
            task = handle.task if isinstance(handle, BuildHandle) else None
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

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

    def plan(self, request: BuildRequest) -> BuildPlan:
        """Validate ``request`` into a BuildPlan; raise InvalidRequest/NotFound before any work."""
        name = check_name(request.name)
        tags = [check_name(t if ":" in t else f"{name.split(':')[0]}:{t}") for t in request.tags]
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
                base = self.templates.get(base_text)
            except NotFound as exc:
                raise NotFound(
                    f"{exc.message}; to import an image use docker-archive:PATH, oci:PATH[:TAG] "
                    "or registry:HOST/NAME:TAG"
                ) from exc
        existing = self.templates.stored(name)
        if existing is not None:
            # Rebuilding a name replaces its template: only for its owner (or an admin), who
            # keeps owning it. A member that cannot see it learns it exists, not whose it is.
            access.require_owner(existing.owner, f"template {name!r}")
        s = self.settings
        inherited = base or TemplateRecord(
            name=name,
            image="",
            cpu=s.default_cpu,
            memory_mib=s.default_memory_mib,
            disk_mib=s.default_disk_mib,
            env={},
            created_at=0.0,
        )

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
            cpu=float(pick(request.cpu, inherited.cpu)),
            memory_mib=int(pick(request.memory_mib, inherited.memory_mib)),
            disk_mib=int(pick(request.disk_mib, inherited.disk_mib)),
            max_cpu=pick(request.max_cpu, inherited.max_cpu),
            max_memory_mib=pick(request.max_memory_mib, inherited.max_memory_mib),
            max_disk_mib=pick(request.max_disk_mib, inherited.max_disk_mib),
            start_cmd=pick(request.start_cmd, inherited.start_cmd),
            warmup=pick(request.warmup, inherited.warmup),
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
        return BuildPlan(
            template=template,
            steps=steps,
            base=base,
            source=source,
            source_label=label,
            context=context.path if context is not None else None,
            tags=[t for t in tags if t != name],
            build_args=dict(request.build_args),
            resources=self.builder.resources(disk),
            step_timeout=float(timeout),
            network=network,
            uploads=uploads,
        )

    def _import_source(self, text: str) -> ImageSource:
        """A docker-archive:/oci: host path: allowed only inside the admin's import dir."""
        kind, _, ref = text.partition(":")
        path, _, tag = ref.partition(":") if kind == "oci" else (ref, "", "")
        import_dir = self.settings.import_dir
        if import_dir is None or not path.startswith("/"):
            where = "" if import_dir is None else f" (only paths in {import_dir} may be named)"
            raise InvalidRequest(f"image source {text!r}: {_UPLOAD_HINT}{where}")
        try:
            resolved = resolve_import(import_dir, path)
        except ContextError as exc:
            raise InvalidRequest(f"image source {text!r}: {exc}; {_UPLOAD_HINT}") from exc
        return ImageSource(kind, f"{resolved}:{tag}" if tag else str(resolved))

    def _check_resources(self, t: TemplateRecord) -> None:
        s = self.settings
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

    async def start_build(self, request: BuildRequest) -> BuildHandle:
        """Validate ``request``, admit its build sandbox against the workspace's capacity, take
        over its uploads, and start the build in the background; returns its BuildHandle (whose
        events the caller streams). Raises before starting if the request is wrong or does not
        fit."""
        try:
            plan = self.plan(request)
        except BaseException:
            self.uploads.discard(_named_uploads(request))
            raise
        builder = self.builder
        name = plan.template.name
        running = self._building.get(name)
        task = running.task if isinstance(running, BuildHandle) else None
        if isinstance(running, BuildHandle) and running.finished and task is not None:
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
            progress = self.on_progress
            owner = access.new_owner()
            handle = BuildHandle(
                name,
                self.log_path(name),
                self.settings.build_log_max_kib * 1024,
                on_progress=(
                    None if progress is None else lambda event: progress(name, owner, event)
                ),
            )
        except BaseException:
            builder.release(plan)
            for owned in plan.owned:
                await asyncio.to_thread(shutil.rmtree, owned, True)
            self._building.pop(name, None)
            raise
        self._building[name] = handle

        async def run() -> None:
            try:
                template = await builder.run(plan, handle, self._commit)
                if template is not None:
                    self.pools.refresh(template.name)  # its ready sandboxes: of the new image
            finally:
                self._building.pop(name, None)

        task = asyncio.get_running_loop().create_task(run(), name=f"build-{name}")
        handle.task = task
        return handle

    async def _commit(self, records: list[TemplateRecord], image_id: str, emit: Emit) -> None:
        """Make a finished build's records visible; a warm template is then warmed before the
        build reports done, and a failed warmup removes the records again."""
        await self.templates.commit(records)
        template = records[0]
        if not template.warm:
            return
        names = [r.name for r in records]
        try:
            await self.warm.warm(template, names, emit)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.templates.forget(names))
            code = getattr(exc, "exit_code", None)
            raise BuildFailed(f"warming the template failed: {exc}", exit_code=code) from exc

    def log_path(self, name: str) -> Path:
        safe = canonical_name(name).replace(":", "@").replace("/", "_")
        return self.settings.data_dir / "build-logs" / f"{safe}.ndjson"

    def logs(self, name: str) -> Path:
        record = self.templates.stored(name)
        if record is not None and not access.visible(record.owner, shared=record.shared):
            raise NotFound(f"template {name!r} has no build log")
        path = self.log_path(name)
        if not path.is_file():
            raise NotFound(f"template {name!r} has no build log")
        return path
