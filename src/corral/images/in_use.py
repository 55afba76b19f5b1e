"""Whether an image's rootfs is in use by a sandbox of any daemon on this host.

A running sandbox's gofer has the rootfs of its image in its mount namespace: as an overlay's
``lowerdir`` (the template's layers over the image) or as a bind mount whose root is the rootfs
itself. So a rootfs is in use while any mount namespace's ``mountinfo`` names it; each namespace
is read once. Used before an image is replaced, so that a rebuild (another checkout's
``scripts/setup`` with a newer recipe) never deletes files under a running daemon's sandboxes.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["mounted_anywhere"]


def _names(line: str, target: str) -> bool:
    fields = line.split()
    if len(fields) < 5:
        return False
    root = fields[3]
    if root == target or root.startswith(target + "/"):
        return True
    for option in line.rpartition(" - ")[2].split(","):
        key, _, value = option.partition("=")
        if key == "lowerdir" and any(
            layer == target or layer.startswith(target + "/") for layer in value.split(":")
        ):
            return True
    return False


def mounted_anywhere(path: Path, proc: Path = Path("/proc")) -> bool:
    """True if any process's mount namespace has ``path`` (or a dir below it) mounted."""
    target = os.path.normpath(str(path))
    seen: set[str] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            namespace = os.readlink(entry / "ns" / "mnt")
        except OSError:
            namespace = entry.name  # no ns link (a fake /proc, a process gone): read its own
        if namespace in seen:
            continue
        seen.add(namespace)
        try:
            text = (entry / "mountinfo").read_text(errors="replace")
        except OSError:
            continue  # the process ended meanwhile
        if any(_names(line, target) for line in text.splitlines()):
            return True
    return False
