"""The size-limited writable disk of a sandbox: a sparse ext4 image, loop-mounted on the host.

runsc is given ``--overlay2=all:dir=<mount point>``: the copy-on-write layers over the shared
read-only template rootfs are backed by files that runsc creates in that directory, and so is the
sized root the agent moves onto (``bundle.py``, in ``root/``): everything the sandbox writes is
bounded by the ext4 size and the template is never written. The image is made a little larger than
the sandbox's disk (``generation.disk_headroom_mib``) so that the sized root, exactly the disk,
fills first. No blocks are reserved for root: the whole disk is the sandbox's. Its loop device
is set up with autoclear (``host_mounts.py``, by system call): the kernel frees it on unmount,
so there is no loop device to track.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from corral.timing import phase

from .host_commands import CommandError, run_command
from .host_mounts import MountFailure, mount_loop_ext4, unmount

__all__ = ["DiskError", "create_disk", "disk_used_mib", "format_disk", "remove_disk"]

_MIB = 1024 * 1024


class DiskError(Exception):
    """Creating, mounting or unmounting a sandbox disk failed."""


async def create_disk(
    image: Path, mount_point: Path, size_mib: int, *, formatted: bool = False
) -> None:
    """Make a sparse ext4 image of ``size_mib`` MiB (unless ``formatted``: ``image`` is one
    already, made by ``format_disk``) and mount it; undo everything on failure."""
    with phase("disk create"):
        await _create_disk(image, mount_point, size_mib, formatted)


async def format_disk(image: Path, size_mib: int) -> None:
    """Make ``image`` a sparse, empty ext4 file system of ``size_mib`` MiB (mkfs.ext4 syncs it
    before it ends). Raises DiskError or CommandError; the caller removes a partial image."""
    if size_mib < 8:
        raise DiskError(f"disk of {size_mib} MiB is too small (at least 8 MiB)")
    await asyncio.to_thread(_sparse_file, image, size_mib * _MIB)
    await run_command(
        [
            *("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal"),
            *("-E", "lazy_itable_init=1", str(image)),
        ]
    )


def _sparse_file(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)


async def _create_disk(image: Path, mount_point: Path, size_mib: int, formatted: bool) -> None:
    if size_mib < 8:
        raise DiskError(f"disk of {size_mib} MiB is too small (at least 8 MiB)")
    try:
        mount_point.mkdir(parents=True, exist_ok=True)
        if not formatted:
            await format_disk(image, size_mib)
        await asyncio.to_thread(mount_loop_ext4, image, mount_point)
    except (OSError, CommandError) as exc:
        with contextlib.suppress(DiskError):
            await remove_disk(image, mount_point)
        raise DiskError(f"creating disk {image}: {exc}") from exc


async def remove_disk(image: Path, mount_point: Path) -> None:
    """Unmount (lazily if busy) and delete the disk. Parts already gone are fine."""
    with phase("disk remove"):
        await _remove_disk(image, mount_point)


async def _remove_disk(image: Path, mount_point: Path) -> None:
    if os.path.ismount(mount_point):
        try:
            await asyncio.to_thread(unmount, mount_point)  # lazily if busy
        except MountFailure as exc:
            raise DiskError(str(exc)) from exc
    if os.path.ismount(mount_point):
        raise DiskError(f"unmounting {mount_point}: still mounted")
    with contextlib.suppress(FileNotFoundError):
        mount_point.rmdir()
    with contextlib.suppress(FileNotFoundError):
        image.unlink()


def disk_used_mib(mount_point: Path) -> int:
    """MiB of the disk in use (rounded up), or 0 when it is not mounted."""
    if not os.path.ismount(mount_point):
        return 0
    st = os.statvfs(mount_point)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return -(-used // _MIB)
