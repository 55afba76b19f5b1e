"""The gVisor runtime: sandboxes as runsc containers over a shared read-only template rootfs.

One sandbox = one runsc container at a time (a new one, a new *generation*, after every restore), a
loop-mounted ext4 disk backing gVisor's root overlay and the sized root the agent moves onto (so
``df /`` shows the disk), and cgroups made by runsc from the OCI spec. Host layout and the state
record: ``layout.py``; making and dropping one generation (disk, sized root, ``/tmp``, cpuset,
config, run or restore) and the layout markers of checkpoint images: ``generation.py``; spec
rendering: ``bundle.py``; the disk: ``disk.py``, formatted ahead by ``spare_disks.py``; the
bounded console log: ``console.py``; the CPU quota lifted while runsc checkpoints or restores:
``cpu_quota.py``; the runsc command line: ``runsc.py`` (a networked boot
starts from ``net_sysctl_hidden.py``); agent injection: ``inject.py``.

Locking: none inside. The service serializes calls for one sandbox; calls for different sandboxes
touch disjoint files (runsc locks its own state).

The process running this runtime becomes a child subreaper (see ``reaper.py``): runsc's sandbox
processes are re-parented to it and reaped by it, which makes ``delete -force`` ~20x faster.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from corral.timing import phase

from .base import Runtime, RuntimeFailure, RuntimeInfo, RuntimeStatus, SandboxSpec, Usage
from .cgroups import SandboxCgroups
from .console import ConsoleError, trim_console, unmount_console
from .cpu_quota import CpuQuotaLifts
from .disk import DiskError, disk_used_mib, remove_disk
from .generation import MIN_SANDBOX_CPUS, Generations, mark_image
from .host_commands import CommandError
from .layout import SandboxPaths, SandboxRecord, is_container_of, valid_sandbox_id
from .reaper import become_subreaper, reap_adopted_zombies
from .runsc import RunscError, RunscOptions, RunscRunner
from .spare_disks import SpareDisks

__all__ = ["GVisorRuntime"]

_STATUS = {
    "running": RuntimeStatus.RUNNING,
    "paused": RuntimeStatus.PAUSED,
    "stopped": RuntimeStatus.STOPPED,
    "created": RuntimeStatus.STOPPED,
}
Undo = Callable[[], Awaitable[None]]
RunscAction = Callable[[str], Awaitable[None]]
_MAX_SOCKET_PATH = 107
_FAILURES = (RunscError, DiskError, ConsoleError, CommandError, OSError, ValueError)


class GVisorRuntime:
    """Runs each sandbox as a runsc container. See the module docstring for the layout.

    ``cgroup_parent`` names the cgroup under which every container gets its own
    (``/<cgroup_parent>/<container id>``). ``subreaper=False`` skips making this process a child
    subreaper (only for tools that run a single runsc command and exit).
    """

    name = "gvisor"

    def __init__(
        self,
        root_dir: Path,
        runsc: str = "runsc",
        platform: str = "systrap",
        debug: bool = False,
        *,
        cgroup_parent: str = "corral",
        command_timeout: float = 60.0,
        subreaper: bool = True,
        state_dir: Path | None = None,
        console_kib: int = 1024,
        min_cpus: int = MIN_SANDBOX_CPUS,
    ) -> None:
        self.root_dir = Path(root_dir)
        self.console_kib = console_kib
        # runsc's sockets live under its --root and a socket path holds at most 107 bytes, so
        # the state dir is a short path of its own (keyed by the sandboxes dir), not below it.
        if state_dir is None:
            key = hashlib.sha256(str(self.root_dir.resolve()).encode()).hexdigest()[:12]
            state_dir = Path("/run/corral") / key
        self._runsc = RunscRunner(
            RunscOptions(
                binary=runsc,
                root=Path(state_dir),
                platform=platform,
                debug_log_dir=self.root_dir / ".debug" if debug else None,
                timeout=command_timeout,
            )
        )
        self._cgroups = SandboxCgroups(cgroup_parent)
        self._quota_lifts = CpuQuotaLifts(self._cgroups)
        self._spares = SpareDisks(self.root_dir / ".spare-disks")
        self._generations = Generations(
            self._runsc, self._cgroups, console_kib, self._spares, min_cpus=min_cpus
        )
        if subreaper:
            become_subreaper()

    # -- queries -------------------------------------------------------------------------------

    def paths(self, sandbox_id: str) -> SandboxPaths:
        """Where the sandbox lives on the host (``console.log`` holds the agent's output)."""
        if not valid_sandbox_id(sandbox_id):
            raise RuntimeFailure(f"invalid sandbox id {sandbox_id!r}")
        # runsc makes a unix socket <root>/runsc-<container id>.sock; sun_path holds 107 bytes.
        socket_path = f"{self._runsc.options.root}/runsc-{sandbox_id}-0000.sock"
        if len(socket_path.encode()) > _MAX_SOCKET_PATH:
            raise RuntimeFailure(
                f"sandbox id {sandbox_id!r} is too long for root dir {self.root_dir} "
                f"(runsc socket path {socket_path!r} exceeds {_MAX_SOCKET_PATH} bytes)"
            )
        return SandboxPaths(self.root_dir, sandbox_id)

    def close(self) -> None:
        """At daemon stop: remove runsc's state dir if no container is left in it."""
        self._spares.close()
        state_dir = self._runsc.options.root
        with contextlib.suppress(OSError):
            state_dir.rmdir()  # only succeeds when empty

    async def list_ids(self) -> list[str]:
        try:
            entries = os.scandir(self.root_dir)
        except FileNotFoundError:
            return []
        with entries:
            return sorted(
                e.name
                for e in entries
                if e.is_dir(follow_symlinks=False) and valid_sandbox_id(e.name)
            )

    async def info(self, sandbox_id: str) -> RuntimeInfo:
        paths = self.paths(sandbox_id)
        trim_console(paths.console_log, self.console_kib)  # the service asks every few seconds
        record = paths.load()
        if record is None:
            return RuntimeInfo(RuntimeStatus.MISSING)
        if record.checkpointed:
            return RuntimeInfo(RuntimeStatus.STOPPED, detail="checkpointed")
        cid = record.current_container
        self._quota_lifts.settle(paths, record)  # one a daemon that died left lifted
        oom_killed = self._cgroups.oom_kills(cid) > 0
        # The common answer, asked of every running sandbox every few seconds, from runsc's state
        # file and /proc (~0.1 ms): its sandbox process is alive and not a zombie. A `runsc
        # state` each (a Go process, ~25 ms of CPU) cost about a core at 300 sandboxes, and so
        # did reaping before each call (it reads the stat of every child of the daemon: all the
        # sandboxes' processes). Anything else (stopped, paused, no state file) is asked of runsc.
        if not oom_killed and self._runsc.recorded_state(cid) == "running":
            return RuntimeInfo(RuntimeStatus.RUNNING)
        reap_adopted_zombies()  # a dead sandbox's process must not linger as a zombie for runsc
        try:
            state = await self._runsc.state(cid)
        except RunscError as exc:
            raise RuntimeFailure(f"inspecting sandbox {sandbox_id}: {exc}") from exc
        if state is None:
            return RuntimeInfo(RuntimeStatus.STOPPED, oom_killed, f"runsc has no container {cid}")
        status = _STATUS.get(str(state.get("status")), RuntimeStatus.STOPPED)
        detail = "killed: out of memory" if oom_killed else ""
        return RuntimeInfo(status, oom_killed, detail)

    async def disk_usage_mib(self, sandbox_id: str) -> int:
        paths = self.paths(sandbox_id)
        record = paths.load()
        if record is None:
            return 0
        return disk_used_mib(paths.disk_mount(record.generation))

    async def usage(self, sandbox_id: str) -> Usage | None:
        record = self.paths(sandbox_id).load()
        if record is None or record.checkpointed:
            return None
        return self._cgroups.usage(record.current_container)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, spec: SandboxSpec) -> None:
        paths = self.paths(spec.sandbox_id)
        if paths.dir.exists():
            raise RuntimeFailure(f"starting sandbox {spec.sandbox_id}: it already exists")
        record = SandboxRecord(spec.sandbox_id, generation=1)
        record.container_ids = [record.current_container]
        with phase("generation"):
            await self._guarded(
                f"starting sandbox {spec.sandbox_id}",
                self._generations.boot(spec, paths, record, image_dir=None),
                undo=lambda: self._destroy(spec.sandbox_id),
            )

    async def restore(self, spec: SandboxSpec, image_dir: Path) -> None:
        sandbox_id = spec.sandbox_id
        paths = self.paths(sandbox_id)
        verb = f"restoring sandbox {sandbox_id}"
        if not image_dir.is_dir() or not any(image_dir.iterdir()):
            raise RuntimeFailure(f"{verb}: no checkpoint image in {image_dir}")
        previous = paths.load() if paths.dir.exists() else None
        if previous is None and paths.dir.exists():
            raise RuntimeFailure(f"{verb}: {paths.dir} exists but has no state record")
        record = SandboxRecord(sandbox_id, generation=previous.generation + 1 if previous else 1)
        cid = record.current_container
        stale = [c for c in (previous.container_ids if previous else []) if c != cid]
        record.container_ids = [*stale, cid]

        async def undo() -> None:
            if previous is None:
                await self._destroy(sandbox_id)
            else:  # keep the sandbox dir (and its log); drop only this generation
                await self._generations.drop(paths, cid, record.generation)
                record.container_ids = [c for c in record.container_ids if c != cid]
                record.checkpointed = True
                paths.save(record)

        with phase("generation"), self._quota_lifts.restoring(sandbox_id):
            await self._guarded(
                verb,
                self._generations.boot(
                    spec,
                    paths,
                    record,
                    image_dir,
                    stale,
                    stale_stopped=previous is not None and previous.checkpointed,
                ),
                undo=undo,
            )

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
        paths = self.paths(sandbox_id)
        verb = f"checkpointing sandbox {sandbox_id}"
        record = paths.load()
        if record is None or record.checkpointed:
            state = "missing" if record is None else "checkpointed"
            raise RuntimeFailure(f"cannot checkpoint sandbox {sandbox_id} in state {state}")
        cid = record.current_container
        try:
            image_dir.mkdir(parents=True, exist_ok=True)
            with self._quota_lifts.checkpointing(paths, record):  # runsc's work, not its own
                await self._runsc.checkpoint(
                    cid, image_dir, leave_running=leave_running, compress=compress
                )
            await asyncio.to_thread(mark_image, image_dir, paths, record, durable=durable)
        except _FAILURES as exc:
            raise RuntimeFailure(f"{verb}: {exc}") from exc
        if leave_running:
            return
        # The image holds memory and filesystem: the container and its disk are of no more use.
        # Delete under the runsc id without waiting for runsc to report it stopped (~1.3 s).
        record.checkpointed = True
        paths.save(record)
        if not defer_cleanup:
            await self.cleanup(sandbox_id)

    async def cleanup(self, sandbox_id: str) -> None:
        paths = self.paths(sandbox_id)
        record = paths.load()
        if record is None or not record.checkpointed:
            return
        try:
            for cid in list(record.container_ids):
                await self._generations.drop(paths, cid, None)
                record.container_ids = [c for c in record.container_ids if c != cid]
                paths.save(record)
            for gen in paths.disk_generations():
                await remove_disk(paths.disk_image(gen), paths.disk_mount(gen))
        except _FAILURES as exc:
            raise RuntimeFailure(f"cleaning up checkpointed sandbox {sandbox_id}: {exc}") from exc

    async def pause(self, sandbox_id: str) -> None:
        await self._on_current(sandbox_id, "pausing", self._runsc.pause)

    async def resume(self, sandbox_id: str) -> None:
        await self._on_current(sandbox_id, "resuming", self._runsc.resume)

    async def freeze(self, sandbox_id: str) -> None:
        cid = self._current(sandbox_id, "freezing")
        try:
            self._cgroups.set_frozen(cid, True)
        except OSError as exc:
            raise RuntimeFailure(f"freezing sandbox {sandbox_id}: {exc}") from exc

    async def thaw(self, sandbox_id: str) -> None:
        record = self.paths(sandbox_id).load()
        if record is None or record.checkpointed:
            return
        try:
            self._cgroups.set_frozen(record.current_container, False)
        except FileNotFoundError:
            return  # its cgroup is gone: nothing of it is frozen
        except OSError as exc:
            raise RuntimeFailure(f"thawing sandbox {sandbox_id}: {exc}") from exc

    def _current(self, sandbox_id: str, verb: str) -> str:
        record = self.paths(sandbox_id).load()
        if record is None or record.checkpointed:
            raise RuntimeFailure(f"{verb} sandbox {sandbox_id}: it is not running")
        return record.current_container

    async def destroy(self, sandbox_id: str) -> None:
        with contextlib.suppress(RuntimeFailure):  # a frozen process cannot even die (cgroup v1)
            await self.thaw(sandbox_id)
        try:
            await self._destroy(sandbox_id)
        except _FAILURES as exc:
            raise RuntimeFailure(f"destroying sandbox {sandbox_id}: {exc}") from exc

    # -- internals -----------------------------------------------------------------------------

    async def _guarded(self, verb: str, work: Awaitable[None], *, undo: Undo) -> None:
        """Await ``work``; on any failure (or cancellation) run ``undo`` then raise."""
        try:
            await work
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await asyncio.shield(undo())
            if isinstance(exc, _FAILURES):
                raise RuntimeFailure(f"{verb}: {exc}") from exc
            raise

    async def _destroy(self, sandbox_id: str) -> None:
        paths = self.paths(sandbox_id)
        record = paths.load()
        ids = set(record.container_ids if record else [])
        if record is not None:
            ids.add(record.current_container)
        prefix = f"{sandbox_id}-"
        ids.update(
            c for c in self._runsc.known_container_ids(prefix) if is_container_of(sandbox_id, c)
        )
        results = await asyncio.gather(
            *(self._generations.drop(paths, c, None) for c in sorted(ids)), return_exceptions=True
        )
        for gen in paths.disk_generations():
            await remove_disk(paths.disk_image(gen), paths.disk_mount(gen))
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        await unmount_console(paths.console_dir)
        if _has_mount_below(paths.dir):
            raise DiskError(f"something is still mounted below {paths.dir}")
        shutil.rmtree(paths.dir, ignore_errors=True)
        reap_adopted_zombies()

    async def _on_current(self, sandbox_id: str, verb: str, action: RunscAction) -> None:
        record = self.paths(sandbox_id).load()
        if record is None or record.checkpointed:
            raise RuntimeFailure(f"{verb} sandbox {sandbox_id}: it is not running")
        try:
            await action(record.current_container)
        except RunscError as exc:
            raise RuntimeFailure(f"{verb} sandbox {sandbox_id}: {exc}") from exc


def _has_mount_below(directory: Path) -> bool:
    prefix = str(directory.resolve()) + "/"
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4].startswith(prefix) for line in fh)
    except OSError:
        return False


if TYPE_CHECKING:

    def _conforms(runtime: GVisorRuntime) -> Runtime:  # mypy checks the protocol here
        return runtime
