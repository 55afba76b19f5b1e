"""Warm templates: run a template's warmup in a sandbox, then keep that sandbox's memory.

After a warm template's build commits, ``warm`` boots a sandbox from it, runs the warmup command
(a shell string: ``python3 -c '...' & sleep 1`` leaves a warmed process running), checkpoints the
sandbox with its processes into ``<data>/warm/<template>-<image>``, and records that image on the
template. Every sandbox created from the template is then restored from it, so the warmed
processes are already running in each, continuing independently.

The warmup sandbox is a real, admitted sandbox (it counts against capacity while it runs) and is
removed whatever happens. A warmup that exits non-zero fails the build with its output.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from corral.config import Settings
from corral.runtime.agent_client import AgentError
from corral.service.errors import OperationFailed
from corral.service.images import seal_image, work_dir
from corral.service.launch import Launcher
from corral.service.model import CreateRequest, ExecSpec
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.templates import TemplateService
from corral.storage import TemplateRecord

log = logging.getLogger("corral.warm")

Emit = Callable[[dict[str, Any]], Awaitable[None]]
WARMUP_TIMEOUT = 600.0


class WarmupFailed(OperationFailed):
    """The warmup command failed; the message carries its exit code and output tail."""

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WarmService:
    """Warms templates (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        templates: TemplateService,
        sandboxes: SandboxService,
        live: LiveSandboxes,
        launcher: Launcher,
    ) -> None:
        self.settings = settings
        self.templates = templates
        self.sandboxes = sandboxes
        self.live = live
        self.launcher = launcher
        self.dir = settings.data_dir / "warm"
        self.work_dir = work_dir(settings)

    async def warm(self, template: TemplateRecord, names: list[str], emit: Emit) -> None:
        """Warm ``template`` (already committed under ``names``) and record its image."""
        if not template.warmup:
            raise OperationFailed(f"template {template.name!r} is warm but has no warmup command")
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        safe = template.name.replace(":", "@").replace("/", "_")
        final = self.dir / f"{safe}-{template.image.removeprefix('sha256:')[:12]}"
        partial = self.work_dir / f"warm-{final.name}.partial"
        await asyncio.to_thread(shutil.rmtree, partial, True)
        record = await self.launcher.create(
            CreateRequest(template=template.name, metadata={"corral.warmup": template.name}),
            cold=True,
        )
        try:
            await emit({"type": "output", "stream": "info", "data": "warming: running warmup\n"})
            client = self.sandboxes.agent(record.id, "warm up")
            exit_code: int | None = None
            tail = b""
            try:
                spec = ExecSpec(shell=template.warmup, timeout=WARMUP_TIMEOUT).to_wire()
                async for event in client.stream_process(spec):
                    kind = event.get("type")
                    if kind in ("stdout", "stderr"):
                        data = base64.b64decode(event["data"])
                        tail = (tail + data)[-4000:]
                        text = data.decode(errors="replace")
                        await emit({"type": "output", "stream": kind, "data": text})
                    elif kind == "exit":
                        exit_code = event.get("exit_code")
            except AgentError as exc:
                raise WarmupFailed(f"warmup could not run: {exc}", None) from exc
            if exit_code != 0:
                raise WarmupFailed(
                    f"warmup {template.warmup!r} failed with exit code {exit_code}: "
                    + tail.decode(errors="replace").strip()[-500:],
                    exit_code,
                )
            await emit({"type": "output", "stream": "info", "data": "warming: checkpointing\n"})
            async with self.sandboxes.lock(record.id):
                # Uncompressed: every sandbox made from the template restores this image, and
                # inflating it was ~50 ms of each restore (raw runsc, an idle python: 246 vs
                # 197 ms); the disk it takes is the warmed memory, once per template.
                await self.live.checkpoint(record.id, partial, leave_running=False, compress=False)

            def seal() -> Path:
                seal_image(partial, final, root=self.settings.data_dir)
                return final

            await self.templates.record_warm_image(names, seal)
            log.info("template %s: warm image at %s", template.name, final)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.sandboxes.kill(record.id))
                self.sandboxes.db.sandboxes.delete(
                    record.id
                )  # an internal sandbox: leave no record
            await asyncio.to_thread(shutil.rmtree, partial, True)
