"""An in-memory runtime with the gVisor runtime's semantics, for the service's unit tests.

State machine per sandbox (anything else raises ``RuntimeFailure``)::

    start ─▶ RUNNING ⇄ PAUSED            (pause / resume)
    RUNNING ─checkpoint(leave_running=False)─▶ STOPPED ("checkpointed")
    STOPPED/absent ─restore─▶ RUNNING     (a new generation)
    any ─destroy─▶ absent (MISSING)       (idempotent)

Checkpoint images are real files (``checkpoint.img`` holding JSON) so tests can copy, delete or
corrupt them. Tests steer the fake with ``fail_next`` (the next call of a verb raises, leaving
nothing behind, like the real runtime), ``crash`` (the init exits, optionally OOM-killed) and
``set_disk_usage``; ``calls`` records every call as ``(verb, sandbox_id)``, ``images`` every
checkpoint as ``(sandbox_id, durable)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Runtime, RuntimeFailure, RuntimeInfo, RuntimeStatus, SandboxSpec, Usage

__all__ = ["FakeRuntime", "FakeSandbox"]

IMAGE_FILE = "checkpoint.img"
_VERBS = {
    "start": "starting",
    "restore": "restoring",
    "checkpoint": "checkpointing",
    "pause": "pausing",
    "resume": "resuming",
    "freeze": "freezing",
    "thaw": "thawing",
    "destroy": "destroying",
    "info": "inspecting",
    "cleanup": "cleaning up",
}


@dataclass
class FakeSandbox:
    spec: SandboxSpec
    status: RuntimeStatus = RuntimeStatus.RUNNING
    generation: int = 1
    oom_killed: bool = False
    detail: str = ""
    disk_used_mib: int = 0
    restored_from: Path | None = None
    usage: Usage = field(default_factory=lambda: Usage(cpu_seconds=0.0, memory_bytes=0))
    frozen: bool = False


class FakeRuntime:
    """See the module docstring. Not thread-safe; fine for one event loop."""

    name = "fake"

    def __init__(self) -> None:
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.calls: list[tuple[str, str]] = []
        self.images: list[tuple[str, bool]] = []  # (sandbox id, durable) per checkpoint
        self._failures: dict[str, str] = {}

    # -- steering ------------------------------------------------------------------------------

    def fail_next(self, verb: str, message: str = "injected failure") -> None:
        """Make the next call of ``verb`` (e.g. ``"start"``) raise ``RuntimeFailure``."""
        if verb not in _VERBS:
            raise ValueError(f"unknown verb {verb!r}")
        self._failures[verb] = message

    def crash(self, sandbox_id: str, *, oom: bool = False) -> None:
        """The sandbox's init exits (killed by the OOM killer with ``oom``)."""
        sbx = self.sandboxes[sandbox_id]
        sbx.status = RuntimeStatus.STOPPED
        sbx.oom_killed = oom
        sbx.detail = "killed: out of memory" if oom else "init exited"

    def set_disk_usage(self, sandbox_id: str, mib: int) -> None:
        self.sandboxes[sandbox_id].disk_used_mib = mib

    def set_usage(self, sandbox_id: str, usage: Usage) -> None:
        self.sandboxes[sandbox_id].usage = usage

    # -- the Runtime protocol ------------------------------------------------------------------

    def _enter(self, verb: str, sandbox_id: str) -> None:
        self.calls.append((verb, sandbox_id))
        message = self._failures.pop(verb, None)
        if message is not None:
            raise RuntimeFailure(f"{_VERBS[verb]} sandbox {sandbox_id}: {message}")

    def _require(self, verb: str, sandbox_id: str, *allowed: RuntimeStatus) -> FakeSandbox:
        sbx = self.sandboxes.get(sandbox_id)
        state = sbx.status if sbx else RuntimeStatus.MISSING
        if sbx is None or state not in allowed:
            raise RuntimeFailure(f"cannot {verb} sandbox {sandbox_id} in state {state.value}")
        return sbx

    async def start(self, spec: SandboxSpec) -> None:
        self._enter("start", spec.sandbox_id)
        if spec.sandbox_id in self.sandboxes:
            raise RuntimeFailure(f"starting sandbox {spec.sandbox_id}: it already exists")
        if spec.network_ready is not None:
            await spec.network_ready()
        self.sandboxes[spec.sandbox_id] = FakeSandbox(spec)

    async def info(self, sandbox_id: str) -> RuntimeInfo:
        self._enter("info", sandbox_id)
        sbx = self.sandboxes.get(sandbox_id)
        if sbx is None:
            return RuntimeInfo(RuntimeStatus.MISSING)
        return RuntimeInfo(sbx.status, sbx.oom_killed, sbx.detail)

    async def list_ids(self) -> list[str]:
        return sorted(self.sandboxes)

    async def destroy(self, sandbox_id: str) -> None:
        self._enter("destroy", sandbox_id)
        self.sandboxes.pop(sandbox_id, None)

    async def checkpoint(
        self,
        sandbox_id: str,
        image_dir: Path,
        *,
        leave_running: bool,
        defer_cleanup: bool = False,
        durable: bool = True,
        compress: bool = True,
    ) -> None:
        self._enter("checkpoint", sandbox_id)
        sbx = self._require("checkpoint", sandbox_id, RuntimeStatus.RUNNING)
        image_dir.mkdir(parents=True, exist_ok=True)
        image = {
            "sandbox_id": sandbox_id,
            "generation": sbx.generation,
            "disk_used_mib": sbx.disk_used_mib,
            "durable": durable,
        }
        self.images.append((sandbox_id, durable))
        (image_dir / IMAGE_FILE).write_text(json.dumps(image))
        if not leave_running:
            sbx.status = RuntimeStatus.STOPPED
            sbx.detail = "checkpointed"

    async def cleanup(self, sandbox_id: str) -> None:
        self._enter("cleanup", sandbox_id)

    async def restore(self, spec: SandboxSpec, image_dir: Path) -> None:
        sandbox_id = spec.sandbox_id
        self._enter("restore", sandbox_id)
        try:
            image = json.loads((image_dir / IMAGE_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeFailure(
                f"restoring sandbox {sandbox_id}: no checkpoint image in {image_dir}"
            ) from exc
        if spec.network_ready is not None:
            await spec.network_ready()
        previous = self.sandboxes.get(sandbox_id)
        generation = previous.generation + 1 if previous else 1
        self.sandboxes[sandbox_id] = FakeSandbox(
            spec,
            generation=generation,
            disk_used_mib=int(image.get("disk_used_mib", 0)),
            restored_from=image_dir,
        )

    async def pause(self, sandbox_id: str) -> None:
        self._enter("pause", sandbox_id)
        self._require("pause", sandbox_id, RuntimeStatus.RUNNING).status = RuntimeStatus.PAUSED

    async def resume(self, sandbox_id: str) -> None:
        self._enter("resume", sandbox_id)
        self._require("resume", sandbox_id, RuntimeStatus.PAUSED).status = RuntimeStatus.RUNNING

    async def freeze(self, sandbox_id: str) -> None:
        self._enter("freeze", sandbox_id)
        self._require("freeze", sandbox_id, RuntimeStatus.RUNNING).frozen = True

    async def thaw(self, sandbox_id: str) -> None:
        self._enter("thaw", sandbox_id)
        sbx = self.sandboxes.get(sandbox_id)
        if sbx is not None:
            sbx.frozen = False

    async def disk_usage_mib(self, sandbox_id: str) -> int:
        sbx = self.sandboxes.get(sandbox_id)
        return sbx.disk_used_mib if sbx else 0

    async def usage(self, sandbox_id: str) -> Usage | None:
        sbx = self.sandboxes.get(sandbox_id)
        return sbx.usage if sbx and sbx.status is RuntimeStatus.RUNNING else None


if TYPE_CHECKING:

    def _conforms(runtime: FakeRuntime) -> Runtime:  # mypy checks the protocol here
        return runtime
