"""Host overlayfs mounts of image layers: the read-only view of an image and the writable view a
build writes its new layer through. Every view is mounted ``nosuid,nodev``: layers keep the
setuid files and (whiteout) device nodes of their images for the sandboxes, and the host never
honours them.

Layer dirs use overlayfs's own format (a deleted path is a 0/0 character device, an opaque dir
carries ``trusted.overlay.opaque=y``), so a stack of layers is one ``mount -t overlay`` away.
Lower dirs are given relative to the layers dir (``mount`` runs there): the options of one mount
fit in a page, and relative names let ~60 layers fit instead of ~40.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

__all__ = [
    "MOUNT_FLAGS",
    "MountError",
    "is_mounted",
    "mount_overlay",
    "unmount",
]

MOUNT_FLAGS = "nosuid,nodev"


class MountError(Exception):
    """A mount or unmount failed; the message names the mount point and the kernel's answer."""


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4] == target for line in fh)
    except OSError:
        return False


def mount_overlay(
    target: Path,
    *,
    layers_dir: Path,
    lower: list[str],
    upper: Path | None = None,
    work: Path | None = None,
) -> None:
    """Mount ``lower`` (layer names under ``layers_dir``, top first) at ``target``; read-only
    unless ``upper``/``work`` are given. A single read-only lower is bind-mounted instead
    (overlayfs refuses one lower dir without an upper)."""
    target.mkdir(parents=True, exist_ok=True)
    if upper is None and len(lower) == 1:
        argv = ["mount", "--bind", "-o", f"ro,{MOUNT_FLAGS}", str(layers_dir / lower[0])]
        _run([*argv, str(target)], target, layers_dir)
        # A bind mount's ro, nosuid and nodev flags apply only on remount.
        _run(["mount", "-o", f"remount,bind,ro,{MOUNT_FLAGS}", str(target)], target, layers_dir)
        return
    options = [MOUNT_FLAGS, "lowerdir=" + ":".join(lower)]
    if upper is not None and work is not None:
        options += [f"upperdir={upper}", f"workdir={work}"]
    else:
        options.insert(0, "ro")
    data = ",".join(options)
    if len(data) > 4000:
        raise MountError(f"mounting {target}: {len(lower)} layers are too many for one overlay")
    _run(["mount", "-t", "overlay", "overlay", "-o", data, str(target)], target, layers_dir)


def unmount(target: Path, *, busy_wait: float = 0.0, lazy: bool = True) -> None:
    """Unmount ``target`` if it is mounted. While it is busy, retry for ``busy_wait`` seconds
    (a sandbox's gofer may still be exiting), then detach it lazily (it goes when unused), or
    with ``lazy=False`` raise MountError."""
    if not is_mounted(target):
        return
    deadline = time.monotonic() + busy_wait
    while True:
        result = subprocess.run(["umount", str(target)], capture_output=True, text=True)
        if result.returncode == 0 or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if result.returncode != 0 and not lazy:
        raise MountError(f"unmounting {target}: {result.stderr.strip()}")
    if result.returncode != 0:
        detached = subprocess.run(["umount", "-l", str(target)], capture_output=True, text=True)
        if detached.returncode != 0:
            raise MountError(f"unmounting {target}: {result.stderr.strip()}")


def _run(argv: list[str], target: Path, cwd: Path) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        raise MountError(f"mounting {target}: {result.stderr.strip() or result.returncode}")
