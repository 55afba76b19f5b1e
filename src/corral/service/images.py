"""Checkpoint images on disk: how one is sealed, recognised as complete, sized, made private and
removed; and the space checks made before one is written.

An image (a parked sandbox's, a fork's, a snapshot's, a warm template's) is written into a
``.partial`` directory, fsynced, marked complete (``IMAGE_COMPLETE``, fsynced; ``seal_image``
can fsync the files and the marker together) and only then renamed into place: a crash leaves
either a complete image or a partial one that the next start removes. An image holds a
sandbox's memory (its secrets, its agent's key): it is
0600 files in 0700 dirs (``make_private``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from corral.config import Settings
from corral.paths import PathEscape, inside
from corral.runtime.base import Runtime, RuntimeFailure
from corral.runtime.generation import fsync_tree
from corral.storage import SandboxRecord
from corral.timing import phase

__all__ = [
    "IMAGE_COMPLETE",
    "files_mib",
    "fsync_dir",
    "host_free_mib",
    "image_complete",
    "image_size_mib",
    "make_private",
    "parked_dir",
    "remove_parked_image",
    "seal_image",
    "work_dir",
]

log = logging.getLogger("corral.images")

IMAGE_COMPLETE = ".complete"


def image_complete(image_dir: Path | str | None) -> bool:
    """Whether a checkpoint image was fully written (the marker is written last, fsynced)."""
    return image_dir is not None and (Path(image_dir) / IMAGE_COMPLETE).is_file()


def image_size_mib(image_dir: Path) -> int:
    with phase("image size"):
        total = sum(p.stat().st_size for p in image_dir.rglob("*") if p.is_file())
    return max(1, -(-total // (1024 * 1024)))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seal_image(partial: Path, final: Path, *, root: Path, sync_tree: bool = False) -> None:
    """Mark a fully written image complete and move it into place, durably. Both paths must
    resolve inside ``root`` (the images' own directory): nothing outside it is ever replaced.
    ``sync_tree``: the image's files were not fsynced yet (a checkpoint taken with ``durable``
    off); they are fsynced here together with the marker, all at once (``fsync_tree``), before
    the rename: a crash before it leaves a partial image, whatever the marker says."""
    with phase("image seal"):
        _seal_image(partial, final, root=root, sync_tree=sync_tree)


def _seal_image(partial: Path, final: Path, *, root: Path, sync_tree: bool) -> None:
    partial, final = inside(root, partial), inside(root, final)
    marker = partial / IMAGE_COMPLETE
    with open(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(f"{time.time()}\n")
        handle.flush()
        if not sync_tree:
            os.fsync(handle.fileno())
    if sync_tree:
        fsync_tree(partial)  # the files, the marker and the directories
    else:
        fsync_dir(partial)
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    fsync_dir(final.parent)


def make_private(directory: Path) -> None:
    """0700 on ``directory`` and the dirs below it, 0600 on its files."""
    os.chmod(directory, 0o700)
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


def parked_dir(settings: Settings) -> Path:
    """Where parked sandboxes' images live (``<data>/parked/<id>``)."""
    return settings.data_dir / "parked"


def work_dir(settings: Settings) -> Path:
    """Scratch space for images being made (fork images, warmups); emptied at every start."""
    return settings.data_dir / "work"


def remove_parked_image(settings: Settings, image_path: Path | str) -> None:
    """Remove a parked image directory, only if it lies inside the parked dir (a record's
    stored path is never trusted to name what may be deleted)."""
    try:
        target = inside(parked_dir(settings), image_path)
    except PathEscape as exc:
        log.error("not removing image %s: %s", image_path, exc)
        return
    with phase("image remove"):
        shutil.rmtree(target, ignore_errors=True)


async def files_mib(runtime: Runtime, record: SandboxRecord) -> int:
    """The files an image of ``record`` holds, for the space checks made before one is written:
    its disk use as the runtime counts it, or its whole disk allowance when the runtime cannot
    say. An image with memory takes up to ``record.memory_mib`` more."""
    try:
        return await runtime.disk_usage_mib(record.id)
    except RuntimeFailure:
        return record.disk_mib


def host_free_mib(directory: Path) -> int:
    return shutil.disk_usage(directory).free // (1024 * 1024)
