"""Reading and removing the cgroups runsc makes for a sandbox container.

Every runsc container gets ``cgroupsPath = /<parent>/<container id>`` in its OCI spec; runsc
creates the cgroup in each controller (v1) or the unified tree (v2) and removes it on
``delete``. This module reads OOM counters and resource usage, freezes and thaws a container's
processes (idle sandboxes), and removes leftovers that runsc did not (a crashed daemon, a
failed start).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from .base import Usage

__all__ = ["SandboxCgroups"]


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat_value(path: Path, key: str) -> int | None:
    """The value of ``key`` in a flat ``name value`` stat file (memory.stat, cpu.stat)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


class SandboxCgroups:
    """The cgroups under ``/<parent>/`` of one cgroup filesystem root (default /sys/fs/cgroup)."""

    def __init__(self, parent: str, root: Path = Path("/sys/fs/cgroup")) -> None:
        self.parent = parent.strip("/")
        self.root = root
        self.unified = (root / "cgroup.controllers").exists()

    def path_for(self, container_id: str) -> str:
        """The OCI ``cgroupsPath`` for a container."""
        return f"/{self.parent}/{container_id}"

    def _dirs(self, container_id: str) -> list[Path]:
        rel = Path(self.parent) / container_id
        if self.unified:
            return [self.root / rel]
        with contextlib.suppress(OSError):
            return [c / rel for c in self.root.iterdir() if c.is_dir() and not c.is_symlink()]
        return []

    def oom_kills(self, container_id: str) -> int:
        """How many processes the kernel OOM killer killed in the container's memory cgroup."""
        rel = Path(self.parent) / container_id
        if self.unified:
            path, key = self.root / rel / "memory.events", "oom_kill"
        else:
            path, key = self.root / "memory" / rel / "memory.oom_control", "oom_kill"
        try:
            text = path.read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
        return 0

    def usage(self, container_id: str) -> Usage | None:
        """CPU time and memory the container's cgroup has charged; None when it has none."""
        rel = Path(self.parent) / container_id
        if self.unified:
            here = self.root / rel
            cpu_usec = _stat_value(here / "cpu.stat", "usage_usec")
            memory = _read_int(here / "memory.current")
            cache = _stat_value(here / "memory.stat", "file")
            cpu_ns = None if cpu_usec is None else cpu_usec * 1000
        else:
            cpu_ns = _read_int(self.root / "cpuacct" / rel / "cpuacct.usage")
            memory = _read_int(self.root / "memory" / rel / "memory.usage_in_bytes")
            cache = _stat_value(self.root / "memory" / rel / "memory.stat", "total_cache")
        if cpu_ns is None or memory is None:
            return None
        return Usage(cpu_seconds=cpu_ns / 1e9, memory_bytes=memory, cache_bytes=cache or 0)

    def prepare_cpuset(self) -> None:
        """Give the parent cgroup (v1) the host's CPUs and memory nodes if it has none yet: a new
        v1 cpuset cgroup starts empty, and a container's cpuset must lie within its parent's."""
        if self.unified:
            return
        above = self.root / "cpuset"
        for part in Path(self.parent).parts:
            here = above / part
            here.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (here / name).read_text().strip():
                    (here / name).write_text((above / name).read_text().strip())
            above = here

    def raise_memory_limit(self, container_id: str, limit_bytes: int) -> None:
        """Set the container's host memory limit (memory+swap too, which must stay >= it)
        to ``limit_bytes``, above what runsc set from the spec."""
        rel = Path(self.parent) / container_id
        if self.unified:
            (self.root / rel / "memory.max").write_text(str(limit_bytes))
            return
        memory = self.root / "memory" / rel
        memsw = memory / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # raise memory+swap first: it may never be below the memory limit
            memsw.write_text(str(limit_bytes))
        (memory / "memory.limit_in_bytes").write_text(str(limit_bytes))

    def cpu_quota(self, container_id: str) -> int | None:
        """The container's CFS quota in µs per period; None when unlimited."""
        rel = Path(self.parent) / container_id
        if self.unified:
            text = (self.root / rel / "cpu.max").read_text().split()[0]
            return None if text == "max" else int(text)
        quota = int((self.root / "cpu" / rel / "cpu.cfs_quota_us").read_text())
        return None if quota < 0 else quota

    def set_cpu_quota(self, container_id: str, quota_us: int | None) -> None:
        """Set the container's CFS quota to ``quota_us`` µs per period (None: unlimited); the
        period stays as runsc set it from the spec."""
        rel = Path(self.parent) / container_id
        if self.unified:
            (self.root / rel / "cpu.max").write_text("max" if quota_us is None else str(quota_us))
        else:
            path = self.root / "cpu" / rel / "cpu.cfs_quota_us"
            path.write_text("-1" if quota_us is None else str(quota_us))

    def set_frozen(self, container_id: str, frozen: bool) -> None:
        """Freeze (or thaw) every host process of the container with the cgroup freezer: a
        frozen sandbox is not scheduled at all, gVisor's own threads included. Raises OSError
        when the container has no freezer cgroup."""
        rel = Path(self.parent) / container_id
        if self.unified:
            (self.root / rel / "cgroup.freeze").write_text("1" if frozen else "0")
        else:
            state = self.root / "freezer" / rel / "freezer.state"
            state.write_text("FROZEN" if frozen else "THAWED")

    def remove(self, container_id: str) -> None:
        """Remove the container's cgroups if they are left (only empty cgroups can go)."""
        for path in self._dirs(container_id):
            with contextlib.suppress(FileNotFoundError, OSError):
                path.rmdir()

    def exists(self, container_id: str) -> bool:
        return any(p.is_dir() for p in self._dirs(container_id))
