"""A sandbox's host console log, bounded: its own small tmpfs, trimmed by the runtime.

runsc writes the container's stdio (the agent's stdout/stderr) and its own errors to
``console.log``. Anything in the sandbox that reaches those file descriptors (a root process can
open ``/proc/1/fd/1``) writes straight into that host file, so it lives on a tmpfs of its own of
``size_kib``: the kernel refuses a write past it (ENOSPC inside the sandbox), whatever the writer
does, and the pages are charged to the writer's (the sandbox's) memory cgroup. ``trim_console``
keeps room for what matters (runsc's errors at the next boot, the agent's last words): once the
log is over half its size, only its newest quarter is kept.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from corral.timing import phase

from .host_mounts import MS_NODEV, MS_NOEXEC, MS_NOSUID, MountFailure, mount_tmpfs, unmount

__all__ = ["ConsoleError", "mount_console", "trim_console", "unmount_console"]


class ConsoleError(Exception):
    """Mounting or unmounting a sandbox's console tmpfs failed."""


async def mount_console(directory: Path, size_kib: int) -> None:
    """Mount the console tmpfs on ``directory`` unless it is mounted already."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.path.ismount(directory):
        return
    try:
        with phase("console mount"):  # a tmpfs: no disk to read, so on the event loop (~0.1 ms)
            mount_tmpfs(
                directory,
                name="corral-console",
                flags=MS_NOSUID | MS_NODEV | MS_NOEXEC,
                options=f"size={size_kib}k,nr_inodes=16,mode=0700",
            )
    except MountFailure as exc:
        raise ConsoleError(f"mounting the console tmpfs on {directory}: {exc}") from exc


async def unmount_console(directory: Path) -> None:
    """Unmount (lazily if busy) and remove ``directory``; gone already is fine."""
    if os.path.ismount(directory):
        try:
            unmount(directory)  # a tmpfs: nothing to flush
        except MountFailure as exc:
            raise ConsoleError(f"unmounting {directory}: {exc}") from exc
    with contextlib.suppress(FileNotFoundError, OSError):
        directory.rmdir()


def trim_console(log: Path, size_kib: int) -> bool:
    """When ``log`` is over half of ``size_kib``, keep only its newest quarter; True if trimmed.

    Writers append (O_APPEND), so after the truncation they go on at the new end. A few bytes
    written during the trim may be lost: this is a log, not a record.
    """
    limit = size_kib * 1024
    try:
        if os.stat(log).st_size <= limit // 2:
            return False
        with open(log, "a+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            keep = limit // 4
            fh.seek(max(0, size - keep))
            tail = fh.read(keep)
            fh.truncate(0)
            fh.write(
                b"[corral: %d older bytes of this console were dropped]\n" % (size - len(tail))
            )
            fh.write(tail)
    except FileNotFoundError:
        return False
    return True
