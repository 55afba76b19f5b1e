"""The gVisor runtime: sandboxes as runsc containers over a shared read-only template rootfs.

One sandbox = one runsc container at a time (a new one, a new *generation*, after every restore), a
loop-mounted ext4 disk backing gVisor's root overlay and the sized root the agent moves onto (so
``df /`` shows the disk), and cgroups made by runsc from the OCI spec. Host layout and the state
record: ``layout.py``; spec rendering: ``bundle.py``; the disk: ``disk.py``; the bounded console
log: ``console.py``; the runsc command line: ``runsc.py``; agent injection: ``inject.py``.

Locking: none inside. The service serializes calls for one sandbox; calls for different sandboxes
touch disjoint files (runsc locks its own state).

The process running this runtime becomes a child subreaper (see ``reaper.py``): runsc's sandbox
processes are re-parented to it and reaped by it, which makes ``delete -force`` ~20x faster.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Runtime, RuntimeFailure, RuntimeInfo, RuntimeStatus, SandboxSpec, Usage
from .bundle import DiskRoot, render_config, write_config
from .cgroups import SandboxCgroups
from .console import ConsoleError, mount_console, trim_console, unmount_console
from .disk import DiskError, create_disk, disk_used_mib, remove_disk
from .host_commands import CommandError
from .layout import SandboxPaths, SandboxRecord, is_container_of, valid_sandbox_id
from .reaper import become_subreaper, reap_adopted_zombies
from .runsc import NetworkMode, RunscError, RunscOptions, RunscRunner

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
# In a checkpoint image: its sandbox had /tmp on its disk (an overlaid bind mount). Images
# without it (older ones) restore into the layout they were taken in, /tmp as gVisor's tmpfs.
TMP_ON_DISK_MARKER = "corral-tmp-on-disk"
# In a checkpoint image: its sandbox ran on a sized root of the MiB this file holds. Its size is
# in the image's memory, so it restores only into a disk of that size; images without it restore
# onto the image's root, as they were taken.
DISK_ROOT_MARKER = "corral-disk-root"
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
        self._next_cpu = 0  # where the next sandbox's cpuset starts: spreads them over the host
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
        reap_adopted_zombies()
        paths = self.paths(sandbox_id)
        trim_console(paths.console_log, self.console_kib)  # the service asks every few seconds
        record = paths.load()
        if record is None:
            return RuntimeInfo(RuntimeStatus.MISSING)
        if record.checkpointed:
            return RuntimeInfo(RuntimeStatus.STOPPED, detail="checkpointed")
        cid = record.current_container
        oom_killed = self._cgroups.oom_kills(cid) > 0
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
        await self._guarded(
            f"starting sandbox {spec.sandbox_id}",
            self._boot(spec, paths, record, image_dir=None),
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
                await self._drop_generation(paths, cid, record.generation)
                record.container_ids = [c for c in record.container_ids if c != cid]
                record.checkpointed = True
                paths.save(record)

        await self._guarded(verb, self._boot(spec, paths, record, image_dir, stale), undo=undo)

    async def checkpoint(
        self,
        sandbox_id: str,
        image_dir: Path,
        *,
        leave_running: bool,
        defer_cleanup: bool = False,
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
            await self._runsc.checkpoint(cid, image_dir, leave_running=leave_running)
            if paths.tmp_lower.is_dir():
                (image_dir / TMP_ON_DISK_MARKER).touch()
            if record.disk_root_mib is not None:
                (image_dir / DISK_ROOT_MARKER).write_text(f"{record.disk_root_mib}\n")
            await asyncio.to_thread(_fsync_tree, image_dir)
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
                await self._drop_generation(paths, cid, None)
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

    async def _boot(
        self,
        spec: SandboxSpec,
        paths: SandboxPaths,
        record: SandboxRecord,
        image_dir: Path | None,
        stale: list[str] | None = None,
    ) -> None:
        """Make the generation ``record.generation`` of the sandbox and start it (or restore
        ``image_dir`` into it). ``stale`` containers of older generations are removed first."""
        paths.dir.mkdir(parents=True, exist_ok=True)
        paths.save(record)  # before runsc hears of the container: destroy can always find it
        cid = record.current_container
        gen = record.generation
        cleanup = [self._drop_generation(paths, c, None) for c in stale or []]
        # A writable root takes the writes itself: no disk to back gVisor's overlay.
        disk = (
            ()
            if spec.writable_root
            else (
                create_disk(
                    paths.disk_image(gen),
                    paths.disk_mount(gen),
                    spec.resources.disk_mib + disk_headroom_mib(spec.resources.disk_mib),
                ),
            )
        )
        await asyncio.gather(*disk, *cleanup)
        for old_gen in paths.disk_generations():
            if old_gen != gen:
                await remove_disk(paths.disk_image(old_gen), paths.disk_mount(old_gen))
        record.container_ids = [cid]
        paths.save(record)
        # The sized root holds /tmp like every other path. Without it (a build's writable root
        # takes its writes itself; an older image keeps the layout it was taken in) /tmp is an
        # overlaid bind mount whose writes land on the disk.
        disk_root = None
        if not spec.writable_root and _wants_disk_root(image_dir, spec.resources.disk_mib):
            disk_root = DiskRoot(paths.disk_root_store(gen), spec.resources.disk_mib)
            disk_root.store.mkdir(mode=0o700)
        record.disk_root_mib = disk_root.size_mib if disk_root else None
        paths.save(record)
        tmp_on_disk = (
            not spec.writable_root
            and disk_root is None
            and image_dir is not None
            and (image_dir / TMP_ON_DISK_MARKER).is_file()
        )
        tmp_source = None
        if tmp_on_disk:
            paths.tmp_lower.mkdir(exist_ok=True)
            paths.tmp_lower.chmod(0o1777)
            tmp_source = str(paths.tmp_lower)
        elif paths.tmp_lower.is_dir():
            paths.tmp_lower.rmdir()  # it marks a generation with /tmp on disk
        cpuset = self._pick_cpuset(spec.resources.cpu)
        if cpuset is not None:
            self._cgroups.prepare_cpuset()
        config = render_config(
            spec,
            cgroups_path=self._cgroups.path_for(cid),
            tmp_source=tmp_source,
            cpuset=cpuset,
            disk_root=disk_root,
        )
        write_config(paths.bundle, config)
        network = NetworkMode(spec.netns_path)
        overlay = None if spec.writable_root else paths.disk_mount(gen)
        await mount_console(paths.console_dir, self.console_kib)
        log = paths.console_log
        trim_console(log, self.console_kib)  # room for runsc's own errors
        if image_dir is None:
            key = None if spec.agent_key is None else f"{spec.agent_key}\n".encode()
            await self._runsc.run(
                cid,
                paths.bundle,
                network=network,
                overlay_dir=overlay,
                log_path=log,
                stdin_data=key,
            )
        else:
            await self._runsc.restore(
                cid,
                paths.bundle,
                image_dir,
                network=network,
                overlay_dir=overlay,
                log_path=log,
                overlay_scope="all" if tmp_on_disk else "root",
            )
        status = self._runsc.recorded_state(cid)  # `runsc state` would cost ~25 ms more
        if status != "running":
            raise RunscError(f"container {cid} is {status or 'gone'} right after booting")
        # The sandbox sees (and its agent's OOM killer enforces) its memory; the host cgroup's
        # killer, which would take the whole sandbox, only acts past a headroom above it.
        memory = spec.resources.memory_mib
        limit_mib = memory + memory_headroom_mib(memory)
        self._cgroups.raise_memory_limit(cid, limit_mib * 1024 * 1024)

    def _pick_cpuset(self, cpu: float) -> str | None:
        """The host CPUs for a sandbox of ``cpu`` vCPUs: ceil(cpu) of them, so that it sees that
        many (``nproc``); None (all) when it is given as many as the host has. The cpu quota
        still bounds its time; successive sandboxes start on successive CPUs."""
        host = sorted(os.sched_getaffinity(0))
        count = max(1, math.ceil(cpu))
        if count >= len(host):
            return None
        start = self._next_cpu % len(host)
        self._next_cpu = start + count
        return ",".join(str(host[(start + i) % len(host)]) for i in range(count))

    async def _drop_generation(self, paths: SandboxPaths, cid: str, gen: int | None) -> None:
        """Delete one runsc container, its cgroups and (if ``gen`` is given) its disk."""
        await self._runsc.delete_force(cid)
        self._cgroups.remove(cid)
        if gen is not None:
            await remove_disk(paths.disk_image(gen), paths.disk_mount(gen))

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
            *(self._drop_generation(paths, c, None) for c in sorted(ids)), return_exceptions=True
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


def _wants_disk_root(image_dir: Path | None, disk_mib: int) -> bool:
    """Whether a generation runs on the sized root: new sandboxes do; a restore does as its image
    was taken, and only into a disk of the size it was taken with (its memory holds that size)."""
    if image_dir is None:
        return True
    marker = image_dir / DISK_ROOT_MARKER
    if not marker.is_file():
        return False
    taken = int(marker.read_text().strip() or 0)
    if taken != disk_mib:
        raise ValueError(
            f"the memory image in {image_dir} was taken on a {taken} MiB disk and restores only "
            f"into a disk of that size (asked for {disk_mib} MiB)"
        )
    return True


def disk_headroom_mib(disk_mib: int) -> int:
    """ext4 space beyond the sandbox's disk: the file system's own metadata and the image root's
    few writes, so that the sized root (exactly ``disk_mib``) fills before the ext4 does."""
    return 16 + disk_mib // 32


def memory_headroom_mib(memory_mib: int) -> int:
    """Host memory a sandbox may use beyond its own: gVisor's own (sentry, page tables) and what
    a process can allocate between two looks of the in-sandbox OOM killer."""
    return 64 + memory_mib // 64


def _has_mount_below(directory: Path) -> bool:
    prefix = str(directory.resolve()) + "/"
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4].startswith(prefix) for line in fh)
    except OSError:
        return False


def _fsync_tree(directory: Path) -> None:
    """fsync every file and directory below ``directory`` (checkpoint images must be durable)."""
    for dirpath, _dirnames, filenames in os.walk(directory):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


if TYPE_CHECKING:

    def _conforms(runtime: GVisorRuntime) -> Runtime:  # mypy checks the protocol here
        return runtime
