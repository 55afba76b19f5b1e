"""Template builds: import a base image, run build steps in a real sandbox, commit one new layer.

A build is a background task that reports build events (below) to a ``BuildHandle``
(``log.py``); the API streams them and every event is also appended to the build's log
(NDJSON, one file per template name, kept after the build for ``corral template logs``).

Filesystem steps (RUN, COPY, WORKDIR) run in one *build sandbox*: a gVisor sandbox whose root is a
host overlayfs mount (lower: the base image's layers, upper: the new layer) with
``SandboxSpec.writable_root`` set, so its writes land in the upper dir. RUN steps are exec'd by the
in-sandbox agent; COPY streams the uploaded context's files through the agent's file API (the
sandbox resolves the paths, so a symlink in the image cannot point a copy at the host). The
sandbox's network is the build's mode (``BuildPlan.network``, default ``internet``; egress as for
any sandbox, docs/network.md), which the build's output names before the first RUN step.

The host boundary: a build reads no host path a caller names. COPY sources come from the build
context the client uploaded (``templates/uploads.py``, ``builds/copy.py``), image archives
from an upload or the admin's import dir (``builds/service.py`` decides, before the build).

Bounds: the build sandbox is admitted against the workspace's capacity like any sandbox (a
reservation held from ``start_build`` to the build's end, ``hold``/``unhold``); its new layer is
written to a size-limited ext4 disk (``runtime/disk.py``; a write past it fails with ENOSPC in
the sandbox) and copied into the store at the end; each step has a time limit; the output kept
(in memory and in the log) is capped, with a marker saying how much was dropped.

Atomicity: the new layer, the image manifest and the template records appear only at the end
(rename, then one DB transaction); a failed or cancelled build removes its work dir, sandbox and
mounts, and leaves no template.

Events (``type`` and fields)::

    start     template, source, steps
    step      index (1-based), total, step (its text)
    output    index, stream (stdout|stderr|info), data (text)
    step_done index, exit_code, seconds
    done      template (the record as a dict), seconds
    failed    error, index (or null), exit_code (or null)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import os
import shutil
import string
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from corral.config import Settings
from corral.images.cas import PREBUILT, ContentStore, ImageConfig, ImageManifest, layer_digest
from corral.images.mounts import mount_overlay, unmount
from corral.images.oci import ImageImportError, ImageSource, fetch, read_layout
from corral.images.steps import BuildStep
from corral.runtime.agent_client import AgentClient, AgentError
from corral.runtime.base import Resources
from corral.runtime.disk import DiskError, create_disk, remove_disk
from corral.runtime.host_commands import CommandError, run_command
from corral.service.builds.copy import CopyFailed, copy_sources
from corral.service.builds.log import BuildHandle
from corral.service.builds.plan import BuildFailed, BuildPlan
from corral.service.builds.sandbox import BuildSandbox
from corral.service.errors import CorralError
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.live import LiveSandboxes
from corral.storage import TemplateRecord

__all__ = ["Commit", "TemplateBuilder"]

log = logging.getLogger("corral.builds")

_ID_ALPHABET = string.ascii_lowercase + string.digits
_AGENT_DIR = ".corral"  # the agent's mount points, made in the root by runsc; not image content


Emit = Callable[[dict[str, Any]], Awaitable[None]]
# Makes a finished build's records visible (and warms a warm template) before it reports done;
# an exception fails the build.
Commit = Callable[[list[TemplateRecord], str, Emit], Awaitable[None]]


class TemplateBuilder:
    """Runs builds (see the module docstring). ``commit`` is called with the finished records,
    the new image id and the build's event sink, to make them visible at once."""

    def __init__(
        self,
        settings: Settings,
        store: ContentStore,
        live: LiveSandboxes,
        admission: Admission,
    ) -> None:
        self.settings = settings
        self.store = store
        # Build sandboxes boot through the live machinery of every sandbox (admission of boots,
        # slot, egress, agent link) and are admitted against the workspace's capacity like any.
        self.live = live
        self.admission = admission

    def resources(self, disk_mib: int) -> Resources:
        """What a build sandbox gets: the default cpu, at least 1 GiB memory, the build's disk."""
        s = self.settings
        return Resources(
            cpu=s.default_cpu,
            memory_mib=max(1024, s.default_memory_mib),
            disk_mib=disk_mib,
            pids=s.default_pids,
        )

    async def admit(self, plan: BuildPlan) -> None:
        """Reserve the build sandbox's resources (if the plan needs one) until the build ends."""
        if plan.resources is None or not plan.needs_sandbox:
            return
        await self.admission.hold(
            _hold_key(plan), plan.resources, f"the build sandbox of template {plan.template.name!r}"
        )

    def release(self, plan: BuildPlan) -> None:
        self.admission.unhold(_hold_key(plan))

    # -- the base image ----------------------------------------------------------------------
    def _base_manifest(self, base: TemplateRecord) -> ImageManifest:
        if base.image.startswith("sha256:"):
            manifest = self.store.get_image(base.image)
            if manifest is None:
                raise BuildFailed(f"the image of template {base.name!r} is missing from the store")
            return manifest
        config = ImageConfig(env=dict(base.env), workdir=base.workdir, user=base.user)
        return ImageManifest(layers=(PREBUILT + base.image,), config=config, source=base.image)

    async def _import(
        self, source: ImageSource, label: str, work: Path, say: Callable[[str], Any]
    ) -> ImageManifest:
        layout = work / "layout"
        await say(f"fetching {label} with skopeo")
        try:
            await fetch(source, layout, lambda _line: None)
            image = read_layout(layout)
            layers: list[str] = []
            for i, layer in enumerate(image.layers, 1):
                diff_id = layer.diff_id
                if self.store.has_verified_layer(diff_id):
                    await say(f"layer {i}/{len(image.layers)} {diff_id[7:19]}: already stored")
                else:
                    size = layer.blob.stat().st_size / 2**20
                    await say(
                        f"layer {i}/{len(image.layers)} {diff_id[7:19]}: unpacking {size:.1f} MiB"
                    )
                    await asyncio.to_thread(self.store.import_layer, layer)
                layers.append(diff_id)
        except ImageImportError as exc:
            # Uploads live in private dirs: name them as the caller knows them.
            raise BuildFailed(str(exc).replace(str(source), label)) from exc
        finally:
            await asyncio.to_thread(shutil.rmtree, layout, True)
        if not layers:
            raise BuildFailed(f"image {label} has no layers")
        return ImageManifest(
            layers=tuple(layers), config=ImageConfig.from_oci(image.config), source=label
        )

    # -- a build -----------------------------------------------------------------------------
    async def run(
        self,
        plan: BuildPlan,
        handle: BuildHandle,
        commit: Commit,
    ) -> TemplateRecord | None:
        """Run ``plan``, reporting to ``handle``; returns the new template or None if it failed."""
        started = time.monotonic()
        work = self.store.work_dir(".build-")
        sandbox: BuildSandbox | None = None
        merged = work / "root"
        disk_image, disk = work / "disk.img", work / "disk"
        mounted = disk_made = False
        index: int | None = None
        reported: BuildFailed | None = None
        total = len(plan.steps)
        source = plan.label
        await handle.emit(
            {"type": "start", "template": plan.template.name, "source": source, "steps": total}
        )

        async def say(text: str) -> None:
            await handle.emit(
                {"type": "output", "index": index, "stream": "info", "data": text + "\n"}
            )

        try:
            if plan.source is not None:
                base = await self._import(plan.source, source, work, say)
            else:
                assert plan.base is not None
                base = self._base_manifest(plan.base)
            config = base.config
            if plan.base is not None:
                config = dataclasses.replace(config, env={**config.env, **plan.base.env})
            if plan.needs_sandbox:
                resources = plan.resources or self.resources(self.settings.build_disk_mib)
                # The new layer (overlay upper and work dirs) lives on the build's own disk.
                disk_made = True
                await create_disk(disk_image, disk, resources.disk_mib)
                (disk / "upper").mkdir()
                (disk / "upper").chmod(0o755)  # the view's "/" while building (umask is 077)
                (disk / "work").mkdir()
                await asyncio.to_thread(
                    mount_overlay,
                    merged,
                    layers_dir=self.store.layers_dir,
                    lower=self.store.lower_dirs(base),
                    upper=disk / "upper",
                    work=disk / "work",
                )
                mounted = True
                sandbox = BuildSandbox(self.live, merged, resources, plan.network)
                if any(step.kind == "run" for step in plan.steps):
                    await say(f"RUN steps run with network mode {plan.network}")
            for i, step in enumerate(plan.steps, 1):
                index = i
                await handle.emit(
                    {"type": "step", "index": i, "total": total, "step": step.describe()}
                )
                t0 = time.monotonic()
                limit = asyncio.timeout(plan.step_timeout)
                try:
                    async with limit:
                        config, exit_code = await self._step(step, config, sandbox, plan, handle, i)
                except TimeoutError as exc:
                    if not limit.expired():
                        raise
                    raise BuildFailed(
                        f"step {i}/{total} ({step.describe()}) took longer than the step timeout "
                        f"of {plan.step_timeout:g} s",
                        index=i,
                    ) from exc
                await handle.emit(
                    {
                        "type": "step_done",
                        "index": i,
                        "exit_code": exit_code,
                        "seconds": round(time.monotonic() - t0, 3),
                    }
                )
                if exit_code != 0:
                    raise BuildFailed(
                        f"step {i}/{total} ({step.describe()}) failed with exit code {exit_code}",
                        index=i,
                        exit_code=exit_code,
                    )
            index = None
            layers = list(base.layers)
            if sandbox is not None:
                await sandbox.close()
                self.release(plan)  # its capacity is free again (a warmup admits its own)
                # The new layer is read only once its overlay is really gone (not lazily).
                await asyncio.to_thread(partial(unmount, merged, busy_wait=5.0, lazy=False))
                mounted = False
                # The store takes layers by rename: bring the layer over from the build's disk.
                # A local copy whose length grows with the layer: no timeout (a big layer on a
                # loaded host is slow, not hung); cancelling the build kills the copy.
                copy = ["cp", "-a", "--preserve=xattr", str(disk / "upper"), str(work)]
                try:
                    await run_command(copy, timeout=None)
                except CommandError as exc:
                    raise BuildFailed(
                        f"copying the new layer out of the build's disk failed: {exc}"
                    ) from exc
                await remove_disk(disk_image, disk)
                disk_made = False
                new_layer = await asyncio.to_thread(self._finish_layer, work / "upper", base)
                if new_layer is not None:
                    layers.append(new_layer)
                    await say(f"new layer {new_layer[7:19]}")
            manifest = ImageManifest(layers=tuple(layers), config=config, source=source)
            image_id = self.store.put_image(manifest)
            template = self._template(plan, config, image_id, source)
            records = [template, *(dataclasses.replace(template, name=tag) for tag in plan.tags)]
            await commit(records, image_id, handle.emit)
            await handle.emit(
                {
                    "type": "done",
                    "template": _public(template),
                    "seconds": round(time.monotonic() - started, 3),
                }
            )
            return template
        except BaseException as exc:
            if isinstance(exc, BuildFailed):
                failure: BuildFailed = exc
            elif isinstance(exc, asyncio.CancelledError):
                failure = BuildFailed("the build was cancelled", index=index)
            elif isinstance(exc, AgentError):
                failure = BuildFailed(
                    f"step {index}: the build sandbox's agent failed: {exc}", index=index
                )
            elif isinstance(exc, CorralError):  # the build sandbox failed to boot
                failure = BuildFailed(f"step {index}: {exc}", index=index)
            elif isinstance(exc, CopyFailed):
                failure = BuildFailed(f"step {index}: {exc}", index=index, exit_code=1)
            elif isinstance(exc, (DiskError, CommandError)):
                failure = BuildFailed(f"preparing the build's disk: {exc}", index=index)
            else:
                log.exception("build of %s failed", plan.template.name)
                where = f"step {index}: " if index else ""
                failure = BuildFailed(f"{where}{type(exc).__name__}: {exc}", index=index)
            # Reported after the clean-up below, so whoever sees "failed" finds nothing left.
            reported = failure
            if not isinstance(exc, Exception):
                raise
            return None
        finally:
            if sandbox is not None:
                await asyncio.shield(sandbox.close())
            if mounted:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(unmount, merged)
            if disk_made:
                try:
                    await remove_disk(disk_image, disk)
                except DiskError as exc:
                    log.error("build of %s: removing its disk failed: %s", plan.template.name, exc)
            await asyncio.to_thread(shutil.rmtree, work, True)
            for owned in plan.owned:
                await asyncio.to_thread(shutil.rmtree, owned, True)
            self.release(plan)
            if reported is not None:
                with contextlib.suppress(Exception):
                    await handle.emit(
                        {
                            "type": "failed",
                            "error": f"building template {plan.template.name!r}: {reported}",
                            "index": reported.index,
                            "exit_code": reported.exit_code,
                        }
                    )

    async def _step(
        self,
        step: BuildStep,
        config: ImageConfig,
        sandbox: BuildSandbox | None,
        plan: BuildPlan,
        handle: BuildHandle,
        index: int,
    ) -> tuple[ImageConfig, int]:
        kind, value = step.kind, step.value
        if kind == "env":
            return dataclasses.replace(config, env={**config.env, **value}), 0  # type: ignore[dict-item]
        if kind == "label":
            return dataclasses.replace(config, labels={**config.labels, **value}), 0  # type: ignore[dict-item]
        if kind == "user":
            return dataclasses.replace(config, user=str(value)), 0
        if kind in ("cmd", "entrypoint"):
            return dataclasses.replace(config, **{kind: list(value)}), 0  # type: ignore[call-overload]
        assert sandbox is not None
        client = await sandbox.agent()
        if kind == "workdir":
            path = os.path.join(config.workdir or "/", str(value))
            await client.mkdir(path, parents=True)
            return dataclasses.replace(config, workdir=path), 0
        if kind == "copy":
            await self._copy(client, step, config, plan, handle, index)
            return config, 0
        if kind == "run":
            return config, await self._run(client, step, config, plan, handle, index)
        if kind == "file":  # from a recipe (service/templates/recipes.py), never from a request
            spec: dict[str, Any] = step.value  # type: ignore[assignment]
            await client.write_file(spec["path"], spec["data"], mode=spec["mode"], parents=True)
            return config, 0
        raise BuildFailed(f"step {index}: unknown step kind {kind!r}", index=index)

    async def _run(
        self,
        client: AgentClient,
        step: BuildStep,
        config: ImageConfig,
        plan: BuildPlan,
        handle: BuildHandle,
        index: int,
    ) -> int:
        spec: dict[str, Any] = {
            "env": {**plan.build_args, **step.build_env, **config.env},
            "cwd": config.workdir or "/",
            "user": config.user,
        }
        if isinstance(step.value, list):
            spec["cmd"] = step.value
        else:
            spec["shell"] = str(step.value)
        stream = client.stream_process(spec)
        exit_code: int | None = None
        try:
            async for event in stream:
                kind = event.get("type")
                if kind in ("stdout", "stderr"):
                    data = base64.b64decode(event.get("data") or "").decode(errors="replace")
                    await handle.emit(
                        {"type": "output", "index": index, "stream": kind, "data": data}
                    )
                elif kind == "exit":
                    exit_code = event.get("exit_code")
                    if exit_code is None:
                        exit_code = 128 + int(event.get("signal") or 9)
        except AgentError as exc:
            if exc.code == "exec_failed":
                raise BuildFailed(
                    f"step {index} ({step.describe()}): {exc}", index=index, exit_code=127
                ) from exc
            raise
        finally:
            await stream.aclose()
        if exit_code is None:
            raise BuildFailed(
                f"step {index} ({step.describe()}): the process vanished", index=index
            )
        return int(exit_code)

    async def _copy(
        self,
        client: AgentClient,
        step: BuildStep,
        config: ImageConfig,
        plan: BuildPlan,
        handle: BuildHandle,
        index: int,
    ) -> None:
        value: dict[str, Any] = step.value  # type: ignore[assignment]
        dst = os.path.join(config.workdir or "/", str(value["dst"]))

        async def say(text: str) -> None:
            await handle.emit(
                {"type": "output", "index": index, "stream": "info", "data": text + "\n"}
            )

        try:
            await copy_sources(client, value, plan.context, dst, say)
        except CopyFailed as exc:
            raise BuildFailed(
                f"step {index} ({step.describe()}): {exc}", index=index, exit_code=1
            ) from exc

    def _finish_layer(self, upper: Path, base: ImageManifest) -> str | None:
        """Drop the agent's mount points from the new layer and store it; None if it is empty."""
        agent_dir = upper / _AGENT_DIR
        if agent_dir.exists() and not any(
            (self.store.layer_path(ref) / _AGENT_DIR).exists() for ref in base.layers
        ):
            shutil.rmtree(agent_dir)
        if not any(upper.iterdir()):
            return None
        digest = layer_digest(upper)
        self.store.add_layer(digest, upper)
        return digest

    def _template(
        self, plan: BuildPlan, config: ImageConfig, image_id: str, source: str
    ) -> TemplateRecord:
        t = plan.template
        start = t.start_cmd
        # A Dockerfile's CMD/ENTRYPOINT (not an imported image's own) is the start command.
        if start is None and any(s.kind in ("cmd", "entrypoint") for s in plan.steps):
            start = [*(config.entrypoint or []), *(config.cmd or [])] or None
        return dataclasses.replace(
            t,
            image=image_id,
            env=dict(config.env),
            workdir=config.workdir,
            user=config.user,
            labels=dict(config.labels),
            start_cmd=start,
            source=source,
            created_at=time.time(),
        )


def _public(template: TemplateRecord) -> dict[str, Any]:
    return dataclasses.asdict(template)


def _hold_key(plan: BuildPlan) -> str:
    return f"build:{plan.template.name}"
