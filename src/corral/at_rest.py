"""The daemon's state at rest: who may read it on the host.

Everything the daemon keeps (the store, the admin key, templates' images, parked sandboxes,
snapshots, warm images, build logs) is private to root: directories 0700, files 0600. The daemon
runs with umask 077 (``corral serve`` sets it) so new files are born private, and every start
corrects what an older version, or an operator's copy, left readable (``secure_data_dir``).

What is *not* changed: the content of image layers and of mounted sandbox disks. Their modes are
what a sandbox sees (``/usr/bin`` must stay 0755 inside), and they are fenced off by their 0700
parents instead.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

__all__ = ["DAEMON_UMASK", "PRIVATE_DIR", "PRIVATE_FILE", "make_private_dir", "secure_data_dir"]

DAEMON_UMASK = 0o077
PRIVATE_DIR = 0o700
# runtime/layout.py's SandboxPaths.tmp_lower: its mode (1777) is what the sandbox's /tmp shows.
_SANDBOX_TMP = "tmp"
PRIVATE_FILE = 0o600

# Trees below the data dir that hold only the daemon's own files (no image content): every dir
# and file in them is made private. Not ``agent/``: the agent's private runtime keeps its modes
# (its loader and interpreter must stay executable), fenced off by its 0700 parent.
_PRIVATE_TREES = ("parked", "snapshots", "warm", "build-logs", "work", "store/images")


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) and make ``path`` itself 0700, even if it existed."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    os.chmod(path, PRIVATE_DIR, follow_symlinks=False)
    return path


def _fix(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        wanted = PRIVATE_DIR
    elif stat.S_ISREG(st.st_mode):
        wanted = PRIVATE_FILE
    else:
        return  # sockets, symlinks, devices: left as they are
    if stat.S_IMODE(st.st_mode) & ~wanted:
        os.chmod(path, stat.S_IMODE(st.st_mode) & wanted)


def _fix_tree(root: Path) -> None:
    """Make every dir and regular file below ``root`` private; never leaves its file system (a
    mount below is not the daemon's to change) and never follows symlinks."""
    try:
        top = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(top.st_mode):
        _fix(str(root), top)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        st = os.lstat(dirpath)
        _fix(dirpath, st)
        keep = []
        for name in dirnames:
            child = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISDIR(child.st_mode) and child.st_dev == top.st_dev:
                keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            full = os.path.join(dirpath, name)
            _fix(full, os.lstat(full))


def secure_data_dir(data_dir: Path) -> None:
    """Create the data dir private, and correct the modes of what an older daemon left in it.

    Direct entries of the data dir (``corral.db`` and its WAL, ``admin.key``, every dir) are made
    private; so are whole trees of the daemon's own files (``_PRIVATE_TREES``) and each
    sandbox's runtime dir and its direct files (not its mounted disk). Cheap: it touches metadata
    of a few hundred entries at most.
    """
    make_private_dir(data_dir)
    with os.scandir(data_dir) as entries:
        for entry in entries:
            _fix(entry.path, entry.stat(follow_symlinks=False))
    for tree in _PRIVATE_TREES:
        _fix_tree(data_dir / tree)
    sandboxes = data_dir / "sandboxes"
    if sandboxes.is_dir() and not sandboxes.is_symlink():
        with os.scandir(sandboxes) as boxes:
            for box in boxes:
                st = box.stat(follow_symlinks=False)
                _fix(box.path, st)
                if stat.S_ISDIR(st.st_mode):
                    with os.scandir(box.path) as files:
                        for item in files:
                            if item.name == _SANDBOX_TMP:
                                continue  # the lower dir of the sandbox's /tmp: 1777 inside
                            _fix(item.path, item.stat(follow_symlinks=False))


def load_or_make_key(path: Path, size: int = 32) -> bytes:
    """The random key in ``path`` (exactly ``size`` bytes), made 0600 through a rename at first use;
    a missing or short file is replaced by a fresh key."""
    try:
        raw = path.read_bytes()
        if len(raw) == size:
            return raw
    except FileNotFoundError:
        pass
    raw = secrets.token_bytes(size)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(raw)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return raw
