"""Host room: whether this host can take more sandbox boots right now, beside the workspace's
reservations (``capacity.py``), which count what sandboxes asked for, not what the host has.

A boot is refused up front (CapacityExceeded naming what is short, with numbers) rather than
started and starved: the host's available memory must keep ``host_reserve_memory_mib`` after
each new sandbox's host cost (runsc's sentry and gofer as they boot), the host's tasks (threads)
must stay under the kernel's limits with room for each new sandbox's threads, and the daemon's
open files under its RLIMIT_NOFILE with room for each new sandbox's. Readings come from /proc;
``read_host`` is replaceable so that a test can give a host that is short of one thing.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corral.service.errors import CapacityExceeded

__all__ = [
    "BOOT_FDS",
    "BOOT_HOST_MIB",
    "BOOT_TASKS",
    "HostReadings",
    "HostRoom",
    "read_host",
]

# What one more running sandbox costs the host beyond its own memory, measured on an idle 64 MiB
# sandbox (bench/density.py): runsc's sentry and gofer PSS as they boot, their threads, and the
# daemon's files for it (agent connections, console, slot). Rounded up.
BOOT_HOST_MIB = 64
BOOT_TASKS = 64
BOOT_FDS = 16
# Kept free for everything else on the host: tasks and the daemon's own files.
RESERVE_TASKS = 1024
RESERVE_FDS = 256


@dataclass(frozen=True)
class HostReadings:
    """The host now: available memory, tasks (threads) and their limit, the daemon's open files
    and their limit."""

    available_memory_mib: int
    tasks: int
    task_limit: int
    open_fds: int
    fd_limit: int


def _meminfo_mib(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name == field:
            return int(rest.split()[0]) // 1024
    raise OSError(f"/proc/meminfo has no {field}")


def _task_limit() -> int:
    limits = [
        int(Path("/proc/sys/kernel/threads-max").read_text()),
        int(Path("/proc/sys/kernel/pid_max").read_text()),
    ]
    # The daemon's own cgroup's pids.max, when it has one (runsc's sandboxes are in their own).
    try:
        cgroup = Path("/proc/self/cgroup").read_text().strip().rpartition(":")[2]
        value = (Path("/sys/fs/cgroup") / cgroup.lstrip("/") / "pids.max").read_text().strip()
        if value != "max":
            limits.append(int(value))
    except (OSError, ValueError):
        pass
    return min(limits)


def read_host() -> HostReadings:
    """Read the host's figures from /proc (cheap: a few small files, no directory walk but the
    daemon's fd table)."""
    tasks = int(Path("/proc/loadavg").read_text().split()[3].partition("/")[2])
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return HostReadings(
        available_memory_mib=_meminfo_mib("MemAvailable"),
        tasks=tasks,
        task_limit=_task_limit(),
        open_fds=len(os.listdir("/proc/self/fd")),
        fd_limit=soft if soft != resource.RLIM_INFINITY else 1 << 20,
    )


class HostRoom:
    """Refuses boots the host cannot take now (see the module docstring)."""

    def __init__(
        self, reserve_memory_mib: int, read: Callable[[], HostReadings] = read_host
    ) -> None:
        self.reserve_memory_mib = reserve_memory_mib
        self.read = read

    def check(self, count: int, what: str) -> None:
        """Raise CapacityExceeded if ``count`` more sandboxes would not fit on the host now,
        naming the first thing short, with numbers and what to do."""
        try:
            host = self.read()
        except (OSError, ValueError):  # a host without these files: the workspace model rules
            return
        need_mib = count * BOOT_HOST_MIB + self.reserve_memory_mib
        if host.available_memory_mib < need_mib:
            raise CapacityExceeded(
                f"the host is short of memory for {what}: {host.available_memory_mib} MiB "
                f"available, {count * BOOT_HOST_MIB} MiB needed to boot and "
                f"{self.reserve_memory_mib} MiB kept free (host_reserve_memory_mib); "
                "park or kill sandboxes, or free memory on the host"
            )
        if host.tasks + count * BOOT_TASKS + RESERVE_TASKS > host.task_limit:
            raise CapacityExceeded(
                f"the host is short of tasks (pids) for {what}: {host.tasks} of "
                f"{host.task_limit} in use, {count * BOOT_TASKS} needed and {RESERVE_TASKS} "
                "kept free; park or kill sandboxes, or raise kernel.threads-max/pid_max"
            )
        if host.open_fds + count * BOOT_FDS + RESERVE_FDS > host.fd_limit:
            raise CapacityExceeded(
                f"the daemon is short of open files for {what}: {host.open_fds} of "
                f"{host.fd_limit} open, {count * BOOT_FDS} needed and {RESERVE_FDS} kept "
                "free; park or kill sandboxes, or raise the daemon's LimitNOFILE"
            )
