"""The runtime mechanism: boots, stops, checkpoints and restores one isolated sandbox.

A runtime knows nothing of the store, the API or capacity; the service layer drives it. It owns,
per sandbox, everything on the host below ``<sandboxes_dir>/<sandbox_id>/`` (OCI bundle, the
size-limited writable disk, logs, runtime ids) plus the runtime's own records (runsc state,
cgroups).

Invariants every implementation keeps:
- ``start`` and ``restore`` return only once the sandbox's init (the in-sandbox agent) is running,
  or raise ``RuntimeFailure`` having removed everything they made (nothing half-created).
- ``destroy`` is idempotent and removes every host resource of the sandbox (runtime container,
  cgroups, mounts, loop devices, files), whatever state it is in.
- ``checkpoint`` writes the image to ``image_dir`` and fsyncs it before returning; with
  ``leave_running=False`` the sandbox's processes are gone afterwards.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class RuntimeFailure(Exception):
    """A runtime operation failed; the message names the sandbox, the verb and the cause."""


@dataclass(frozen=True)
class Resources:
    """What one sandbox is given. ``cpu`` in vCPUs (fractions allowed), memory and disk in MiB."""

    cpu: float
    memory_mib: int
    disk_mib: int
    pids: int = 4096


@dataclass(frozen=True)
class AgentMount:
    """How the in-sandbox agent is injected read-only: host paths bind-mounted at private paths.

    ``mounts`` maps a host path to a destination inside the sandbox; ``argv`` is the agent's command
    line as seen inside the sandbox (loader, interpreter, script, flags). ``tools`` is the command
    line of the daemon's own interpreter injected beside it (loader, interpreter, ``-I -S``), with
    which the daemon runs its tools inside the sandbox (files-only snapshots); empty: none.
    """

    mounts: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a runtime needs to boot (or restore) one sandbox.

    ``sandbox_id`` is fixed-width (runsc matches container ids by prefix). ``rootfs`` is the
    template's read-only root filesystem, shared by all sandboxes of that template; the runtime puts
    a private copy-on-write layer over it limited to ``resources.disk_mib``. ``netns_path`` is the
    network namespace the sandbox joins (its ``eth0`` is taken over by the runtime), or None for
    no network at all.

    ``writable_root`` changes who owns the root's writes: the runtime puts no overlay of its own
    over ``rootfs`` (runsc ``--overlay2=none``, no disk), so every write inside the sandbox lands
    in the host directory ``rootfs`` itself. The caller owns that directory (the template builder
    gives a host overlayfs mount whose upper dir becomes a new image layer); never set it for a
    shared rootfs. ``resources.disk_mib`` is then not enforced.

    ``agent_key`` is the key the agent must be started with (``corral.agent.keys``): ``start``
    hands it to the init on its stdin and nowhere else (never the environment, the command line,
    the OCI config or any other file). ``restore`` ignores it: a restored agent keeps the key in
    its memory until the daemon rekeys it.

    ``network_ready``, when given, is awaited by ``start`` and ``restore`` after the runtime has
    made what the sandbox needs of its own (its disk, its configuration) and before anything of
    the sandbox runs: its caller sets up the slot behind ``netns_path`` (addresses, egress rules)
    meanwhile, so the two overlap and the sandbox still never runs on a slot that is not ready
    (what "ready" needs is the caller's to say: ``LiveSandboxes._run``).
    If it raises, the boot fails with that error and is undone like any failed boot.
    """

    sandbox_id: str
    rootfs: Path
    resources: Resources
    agent: AgentMount
    netns_path: str | None = None
    hostname: str = "corral"
    annotations: dict[str, str] = field(default_factory=dict)
    writable_root: bool = False
    agent_key: str | None = field(default=None, repr=False)
    # A host file bind-mounted read-only at /etc/resolv.conf (the sandbox's resolver), or None.
    resolv_conf: str | None = None
    network_ready: Callable[[], Awaitable[None]] | None = field(
        default=None, repr=False, compare=False
    )


class RuntimeStatus(enum.Enum):
    """What the runtime reports about a sandbox."""

    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"  # the runtime still knows it but its init has exited
    MISSING = "missing"  # the runtime has no record of it


@dataclass(frozen=True)
class RuntimeInfo:
    """A sandbox's status with the reason it stopped, when the runtime knows one."""

    status: RuntimeStatus
    oom_killed: bool = False
    detail: str = ""


@dataclass(frozen=True)
class Usage:
    """What a running sandbox has used on the host: CPU time since it started, and memory now
    (``cache_bytes``: the part of ``memory_bytes`` that is file cache)."""

    cpu_seconds: float
    memory_bytes: int
    cache_bytes: int = 0


class Runtime(Protocol):
    """An isolation engine. All methods are safe to call concurrently for different sandboxes;
    the service serializes calls for one sandbox."""

    name: str

    async def start(self, spec: SandboxSpec) -> None:
        """Boot a new sandbox whose init is the agent."""
        ...

    async def info(self, sandbox_id: str) -> RuntimeInfo:
        """Report whether the sandbox is running, and why it stopped if it did."""
        ...

    async def list_ids(self) -> list[str]:
        """Sandbox ids that have host resources (for reconciliation at daemon start)."""
        ...

    async def destroy(self, sandbox_id: str) -> None:
        """Stop the sandbox if it runs and remove all its host resources. Idempotent."""
        ...

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
        """Save memory and filesystem state to ``image_dir`` (created; fsynced unless not
        ``durable``: a scratch image that no restart may read). Without ``leave_running`` the
        sandbox's processes are gone afterwards; ``defer_cleanup`` leaves removing what they ran
        on (container records, disk) to a later ``cleanup``. Without ``compress`` the memory is
        kept as it is: more disk, a faster restore (an image restored many times)."""
        ...

    async def cleanup(self, sandbox_id: str) -> None:
        """Remove what a checkpointed sandbox ran on; a no-op for any other. Idempotent."""
        ...

    async def restore(self, spec: SandboxSpec, image_dir: Path) -> None:
        """Boot ``spec.sandbox_id`` from an image made by ``checkpoint``; processes continue."""
        ...

    async def pause(self, sandbox_id: str) -> None:
        """Freeze all processes of the sandbox."""
        ...

    async def resume(self, sandbox_id: str) -> None:
        """Unfreeze a paused sandbox."""
        ...

    async def freeze(self, sandbox_id: str) -> None:
        """Stop scheduling every host process of the running sandbox (cgroup freezer): it costs
        no CPU until ``thaw``. Nothing may talk to it meanwhile (it would wait)."""
        ...

    async def thaw(self, sandbox_id: str) -> None:
        """Undo ``freeze``; a no-op for a sandbox that is not frozen or not running."""
        ...

    async def disk_usage_mib(self, sandbox_id: str) -> int:
        """MiB used on the host by the sandbox's writable layer."""
        ...

    async def usage(self, sandbox_id: str) -> Usage | None:
        """CPU and memory the running sandbox uses on the host; None when it is not running."""
        ...
