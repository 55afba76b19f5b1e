"""One generation of a gVisor sandbox, and what a checkpoint image says of the one it was taken in.

A sandbox runs as one runsc container at a time; every start and every restore makes a new
*generation* (``GVisorRuntime`` decides when): ``Generations.boot`` makes its ext4 disk backing
gVisor's root overlay (sized with ``disk_headroom_mib``), the sized root the agent moves onto, its
``/tmp``, cpuset, OCI config and console, runs or restores the container and lifts the host
cgroup's memory limit by ``memory_headroom_mib``; ``Generations.drop`` removes one container,
its cgroups and disk.

A checkpoint image records the layout it was taken in (``mark_image``): ``TMP_ON_DISK_MARKER``
(``/tmp`` was an overlaid bind mount on the disk) and ``DISK_ROOT_MARKER`` (the sized root's MiB,
which the image's memory holds: it restores only into a disk of that size, ``wants_disk_root``).

Locking: none; ``GVisorRuntime``'s callers serialize calls for one sandbox.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corral.timing import beside, phase

from .base import SandboxSpec
from .bundle import DiskRoot, cpu_quota_us, render_config, write_config
from .cgroups import SandboxCgroups
from .console import mount_console, trim_console
from .disk import create_disk, remove_disk
from .layout import SandboxPaths, SandboxRecord
from .runsc import NetworkMode, RunscError, RunscRunner
from .spare_disks import SpareDisks

__all__ = [
    "DISK_ROOT_MARKER",
    "MIN_SANDBOX_CPUS",
    "TMP_ON_DISK_MARKER",
    "Generations",
    "disk_headroom_mib",
    "fsync_tree",
    "mark_image",
    "memory_headroom_mib",
    "wants_disk_root",
]

log = logging.getLogger("corral.runtime")

# In a checkpoint image: its sandbox had /tmp on its disk (an overlaid bind mount). Images
# without it (older ones) restore into the layout they were taken in, /tmp as gVisor's tmpfs.
TMP_ON_DISK_MARKER = "corral-tmp-on-disk"
# In a checkpoint image: its sandbox ran on a sized root of the MiB this file holds. Its size is
# in the image's memory, so it restores only into a disk of that size; images without it restore
# onto the image's root, as they were taken.
DISK_ROOT_MARKER = "corral-disk-root"
# The fewest host CPUs a sandbox's sentry is given (see Generations._pick_cpuset).
MIN_SANDBOX_CPUS = 2


class Generations:
    """Boots and drops the generations of every sandbox of one ``GVisorRuntime``.

    Shares the runtime's ``RunscRunner`` and ``SandboxCgroups``; ``console_kib`` bounds each
    console log. Successive sandboxes' cpusets start on successive host CPUs.
    """

    def __init__(
        self,
        runsc: RunscRunner,
        cgroups: SandboxCgroups,
        console_kib: int,
        spares: SpareDisks | None = None,
        *,
        min_cpus: int = MIN_SANDBOX_CPUS,
    ) -> None:
        self._runsc = runsc
        self._cgroups = cgroups
        self.console_kib = console_kib
        self._spares = spares
        self.min_cpus = max(1, min_cpus)
        self._next_cpu = 0  # where the next sandbox's cpuset starts: spreads them over the host

    async def boot(
        self,
        spec: SandboxSpec,
        paths: SandboxPaths,
        record: SandboxRecord,
        image_dir: Path | None,
        stale: list[str] | None = None,
        *,
        stale_stopped: bool = False,
    ) -> None:
        """Make the generation ``record.generation`` of the sandbox and start it (or restore
        ``image_dir`` into it). ``stale`` containers of older generations and their disks are
        removed first; with ``stale_stopped`` (they stopped at a checkpoint: a wake's) beside
        the boot instead, while runsc restores: they share nothing with the new generation but
        the state record, which only this call writes, and the record names them until they
        are gone."""
        paths.dir.mkdir(parents=True, exist_ok=True)
        paths.save(record)  # before runsc hears of the container: destroy can always find it
        retiring = None
        if stale_stopped:
            with beside():  # its phases overlap the boot's
                retiring = asyncio.create_task(self._retire(paths, stale or [], record.generation))
        try:
            await self._boot(spec, paths, record, image_dir, None if retiring else stale or [])
        finally:
            if retiring is not None:  # never left running past the boot, whatever happened
                await asyncio.wait({retiring})
        if retiring is not None:
            left = retiring.result()  # the containers whose removal failed stay named
            record.container_ids = [*left, record.current_container]
            paths.save(record)

    async def _retire(self, paths: SandboxPaths, stale: list[str], gen: int) -> list[str]:
        """Remove the stopped containers ``stale`` and the disks of generations before ``gen``;
        return the containers whose removal failed (logged), for a later cleanup to retry."""
        results = await asyncio.gather(
            *(self.drop(paths, c, None) for c in stale), return_exceptions=True
        )
        left = []
        for cid, result in zip(stale, results, strict=True):
            if isinstance(result, BaseException):
                log.error("removing the stopped container %s failed: %s", cid, result)
                left.append(cid)
        for old_gen in paths.disk_generations():
            if old_gen < gen:
                try:
                    await remove_disk(paths.disk_image(old_gen), paths.disk_mount(old_gen))
                except Exception as exc:
                    log.error("removing the disk of generation %d failed: %s", old_gen, exc)
        return left

    async def _boot(
        self,
        spec: SandboxSpec,
        paths: SandboxPaths,
        record: SandboxRecord,
        image_dir: Path | None,
        stale: list[str] | None,
    ) -> None:
        """``boot`` after the record is saved; ``stale``: the containers to remove first (None:
        they and the older disks are removed beside, by ``boot``)."""
        cid = record.current_container
        gen = record.generation
        cleanup = [self.drop(paths, c, None) for c in stale or []]
        # A writable root takes the writes itself: no disk to back gVisor's overlay.
        disk: tuple[Awaitable[None], ...] = ()
        if not spec.writable_root:
            size = spec.resources.disk_mib + disk_headroom_mib(spec.resources.disk_mib)
            image = paths.disk_image(gen)
            formatted = self._spares is not None and self._spares.take(image, size)
            disk = (create_disk(image, paths.disk_mount(gen), size, formatted=formatted),)
        await asyncio.gather(*disk, *cleanup)
        if stale is not None:  # else a wake's stopped generations go beside (``boot``)
            for old_gen in paths.disk_generations():
                if old_gen != gen:
                    await remove_disk(paths.disk_image(old_gen), paths.disk_mount(old_gen))
            record.container_ids = [cid]
            paths.save(record)
        # The sized root holds /tmp like every other path. Without it (a build's writable root
        # takes its writes itself; an older image keeps the layout it was taken in) /tmp is an
        # overlaid bind mount whose writes land on the disk.
        disk_root = None
        if not spec.writable_root and wants_disk_root(image_dir, spec.resources.disk_mib):
            disk_root = DiskRoot(paths.disk_root_store(gen), spec.resources.disk_mib)
            disk_root.store.mkdir(mode=0o700)
        record.disk_root_mib = disk_root.size_mib if disk_root else None
        # Restored without its CPU quota, given it once runsc is done (``cpu_quota.py``).
        quota = cpu_quota_us(spec.resources.cpu)
        record.cpu_quota_due = quota if image_dir is not None else None
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
            cpu_quota=image_dir is None,
        )
        with phase("bundle write"):
            write_config(paths.bundle, config)
        network = NetworkMode(spec.netns_path)
        overlay = None if spec.writable_root else paths.disk_mount(gen)
        await mount_console(paths.console_dir, self.console_kib)
        log = paths.console_log
        trim_console(log, self.console_kib)  # room for runsc's own errors
        if spec.network_ready is not None:  # the slot, set up while the above was made
            with phase("network wait"):
                await spec.network_ready()
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
        if record.cpu_quota_due is not None:
            self._cgroups.set_cpu_quota(cid, quota)
            record.cpu_quota_due = None
            paths.save(record)
        # The sandbox sees (and its agent's OOM killer enforces) its memory; the host cgroup's
        # killer, which would take the whole sandbox, only acts past a headroom above it.
        memory = spec.resources.memory_mib
        limit_mib = memory + memory_headroom_mib(memory)
        self._cgroups.raise_memory_limit(cid, limit_mib * 1024 * 1024)
        if disk and self._spares is not None:
            self._spares.refill()  # after the boot, not on its path

    def _pick_cpuset(self, cpu: float) -> str | None:
        """The host CPUs for a sandbox of ``cpu`` vCPUs: ceil(cpu) of them but never fewer than
        ``min_cpus`` (2 by default); None (all) when that is as many as the host has. The cpu
        quota still bounds its time; successive sandboxes start on successive CPUs.

        Not one by default: runsc gives the sentry as many Go Ps (GOMAXPROCS) as the sandbox has
        CPUs, and with one, a packet reaching a sandbox idle for 50 ms is answered 10-20 ms late
        and posix_spawn takes longer (bench/idle_wakeup.py; ``--cpu-num-from-quota`` stops at 2
        for the same reason). Two cost more while idle (about twice the host CPU of an unfrozen
        idle sandbox, a few MiB): the ``sandbox_min_cpus`` setting chooses. What the sandbox's
        processes see is ceil(cpu) either way: the agent narrows itself to that many
        (``CORRAL_AGENT_CPUS``, agent/cpus.py)."""
        host = sorted(os.sched_getaffinity(0))
        count = max(self.min_cpus, math.ceil(cpu))
        if count >= len(host):
            return None
        start = self._next_cpu % len(host)
        self._next_cpu = start + count
        return ",".join(str(host[(start + i) % len(host)]) for i in range(count))

    async def drop(self, paths: SandboxPaths, cid: str, gen: int | None) -> None:
        """Delete one runsc container, its cgroups and (if ``gen`` is given) its disk."""
        await self._runsc.delete_force(cid)
        with phase("cgroup remove"):
            self._cgroups.remove(cid)
        if gen is not None:
            await remove_disk(paths.disk_image(gen), paths.disk_mount(gen))


def wants_disk_root(image_dir: Path | None, disk_mib: int) -> bool:
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


def fsync_tree(directory: Path) -> None:
    """fsync every file and directory below ``directory`` (checkpoint images must be durable),
    all at once from a few threads: the file system commits its journal for all of them
    together instead of once per file (a fresh 5 MB image of five files: 13 ms instead of 33 ms
    at load 10). Raises the first failure once all have ended."""
    targets: list[tuple[str, int]] = []
    for dirpath, _dirnames, filenames in os.walk(directory):
        targets.extend((os.path.join(dirpath, name), os.O_RDONLY) for name in filenames)
        targets.append((dirpath, os.O_RDONLY | os.O_DIRECTORY))
    if len(targets) == 1:
        _fsync(targets[0])
        return
    with ThreadPoolExecutor(min(_FSYNC_THREADS, len(targets))) as pool:
        for _ in pool.map(_fsync, targets):  # re-raises the first failure
            pass


_FSYNC_THREADS = 8


def _fsync(target: tuple[str, int]) -> None:
    path, flags = target
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_image(
    image_dir: Path, paths: SandboxPaths, record: SandboxRecord, *, durable: bool = True
) -> None:
    """Record in a just-written checkpoint image the layout of the generation it was taken in,
    then, if ``durable``, make it durable (``fsync_tree``; blocking: call it in a thread)."""
    if paths.tmp_lower.is_dir():
        (image_dir / TMP_ON_DISK_MARKER).touch()
    if record.disk_root_mib is not None:
        (image_dir / DISK_ROOT_MARKER).write_text(f"{record.disk_root_mib}\n")
    if durable:
        with phase("image fsync"):
            fsync_tree(image_dir)
