"""Confinement of the paths the daemon derives: ``inside(root, path)``.

Every directory the daemon removes, renames or fills (a parked image, a snapshot, an import's
work dir) is named by a path it built itself from its data dir and a validated id or name. Before
anything is removed or renamed, ``inside`` checks that the path, with every symlink and ``..``
resolved, still lies strictly below its own root: a record whose stored path was tampered with, or
an id that slipped past validation, then fails loudly instead of touching a host file.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PathEscape", "inside"]


class PathEscape(ValueError):
    """A derived path resolves outside the directory it must stay in."""


def inside(root: Path | str, path: Path | str) -> Path:
    """``path`` resolved, if it lies strictly below ``root`` (also resolved); else PathEscape.

    ``path`` may be relative (to ``root``) or absolute; it need not exist. The root itself is
    not "inside" (removing it would remove everything it holds).
    """
    base = Path(os.path.realpath(root))
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = base / candidate
    resolved = Path(os.path.realpath(candidate))
    if resolved == base or not resolved.is_relative_to(base):
        raise PathEscape(f"path {str(path)!r} is not inside {str(base)!r}; refusing to touch it")
    return resolved
