"""Files-only snapshots: the tools run inside the sandbox, and the host's checks of their output.

A sandbox's writable layer lives in gVisor's filestore, which the host cannot read as a tree, so
the listing and the tar are made inside the sandbox, by the daemon's own interpreter injected
read-only (``SandboxService.injected_python``) running the scripts below: never the image's
``find``/``tar``, which the image (or the sandbox's code) may have replaced.

Their output is still hostile (the sandbox's code runs as root beside them). So the host:
- bounds it (``listing_limit``, the tar limit in ``snapshots``) and kills the tool past the bound;
- checks every listed path (``check_path``: absolute, no empty, ``.`` or ``..`` components, no NUL,
  bounded lengths) and refuses the whole listing if one is malformed;
- never joins a listed path onto a host path: it compares the listing with its own walk of the
  image (``walk_image``, keyed by path bytes) in memory.
The tar is never unpacked on the host; it is unpacked inside the sandbox restored from it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from corral.service.errors import InvalidRequest

__all__ = [
    "EXTRACT_SCRIPT",
    "LIST_SCRIPT",
    "PRUNE",
    "TAR_SCRIPT",
    "BadListing",
    "BoundedBuffer",
    "Entry",
    "check_path",
    "compare",
    "listing_limit",
    "parse_listing",
    "walk_image",
]

# /etc/resolv.conf: a read-only bind mount of the daemon's (the sandbox's resolver), not a file
# of the sandbox: never captured, never written back.
PRUNE = (b"/proc", b"/sys", b"/dev", b"/.corral", b"/run", b"/etc/resolv.conf")
MAX_PATH = 4096
MAX_NAME = 255
MAX_LISTING_BYTES = 64 << 20

# argv[1]: the most entries to print (one more tells the host there were too many). Prints
# "KIND SIZE MTIME PATH\0" for every entry under / on the root filesystem (KIND d, f, l or o).
LIST_SCRIPT = r"""
import os, stat, sys
limit = int(sys.argv[1]) + 1
out = sys.stdout.buffer
prune = {b"/proc", b"/sys", b"/dev", b"/.corral", b"/run", b"/etc/resolv.conf"}
root_dev = os.lstat(b"/").st_dev
stack = [b"/"]
count = 0
while stack and count < limit:
    top = stack.pop()
    try:
        entries = list(os.scandir(top))
    except OSError:
        continue
    for entry in entries:
        path = os.path.join(top, entry.name)
        if path in prune:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        mode = st.st_mode
        kind = b"d" if stat.S_ISDIR(mode) else b"f" if stat.S_ISREG(mode) else (
            b"l" if stat.S_ISLNK(mode) else b"o")
        out.write(b"%s %d %d %s\0" % (kind, st.st_size, int(st.st_mtime), path))
        count += 1
        if count >= limit:
            break
        if kind == b"d" and st.st_dev == root_dev:
            stack.append(path)
out.flush()
"""

# argv[1]: a file of NUL-separated absolute paths. Writes a tar of them (no recursion, links
# kept as links) to stdout; paths that vanished since the listing are skipped.
TAR_SCRIPT = r"""
import os, sys, tarfile
with open(sys.argv[1], "rb") as handle:
    names = [n for n in handle.read().split(b"\0") if n]
with tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
    for name in names:
        try:
            tar.add(os.fsdecode(name), recursive=False)
        except OSError:
            pass
"""

# argv[1]: a tar made by TAR_SCRIPT, unpacked over / and removed.
EXTRACT_SCRIPT = r"""
import os, sys, tarfile
with tarfile.open(sys.argv[1], "r:") as tar:
    if hasattr(tarfile, "fully_trusted_filter"):
        tar.extractall("/", filter="fully_trusted")
    else:
        tar.extractall("/")
os.unlink(sys.argv[1])
"""


class BadListing(InvalidRequest):
    """The sandbox's listing of its files is malformed (so it was forged): nothing is taken."""


@dataclass(frozen=True)
class Entry:
    kind: bytes  # d, f, l or o (anything else: fifo, socket, device)
    size: int
    mtime: int
    path: bytes


class BoundedBuffer:
    """Collects a tool's output; the caller bounds it (``run_collect(limit=...)``)."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    def data(self) -> bytes:
        return b"".join(self._chunks)


def listing_limit(max_files: int) -> int:
    return min(MAX_LISTING_BYTES, (max_files + 1) * (MAX_PATH + 64))


def check_path(path: bytes) -> bytes:
    """``path`` if it is a plain absolute path in the sandbox, else BadListing."""
    if not path.startswith(b"/") or len(path) > MAX_PATH or b"\0" in path:
        raise BadListing(f"path {path[:80]!r} is not a plain absolute path")
    for part in path[1:].split(b"/"):
        if part in (b"", b".", b"..") or len(part) > MAX_NAME:
            raise BadListing(f"path {path[:80]!r} has an empty, '.' or '..' component")
    return path


def _pruned(path: bytes) -> bool:
    return any(path == p or path.startswith(p + b"/") for p in PRUNE)


def parse_listing(data: bytes, max_files: int) -> list[Entry]:
    """The entries of LIST_SCRIPT's output; BadListing if any is malformed or there are more
    than ``max_files``."""
    entries: list[Entry] = []
    for line in data.split(b"\0"):
        if not line:
            continue
        if len(entries) >= max_files:
            raise BadListing(f"the sandbox holds more than {max_files} files")
        parts = line.split(b" ", 3)
        if len(parts) != 4 or parts[0] not in (b"d", b"f", b"l", b"o"):
            raise BadListing(f"listing line {line[:80]!r} is malformed")
        kind, size, mtime, path = parts
        if not (size.isdigit() and mtime.lstrip(b"-").isdigit()) or len(size + mtime) > 40:
            raise BadListing(f"listing line {line[:80]!r} is malformed")
        entries.append(Entry(kind, int(size), int(mtime), check_path(path)))
    return entries


def walk_image(rootfs: os.PathLike[str] | str) -> dict[bytes, Entry]:
    """The image's entries keyed by their path in the sandbox; symlinks are never followed."""
    root = os.fsencode(rootfs)
    found: dict[bytes, Entry] = {}
    stack = [b"/"]
    while stack:
        top = stack.pop()
        try:
            scanned = list(os.scandir(root + top))
        except OSError:
            continue
        for item in scanned:
            path = os.path.join(top, item.name)
            if _pruned(path):
                continue
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            mode = st.st_mode
            kind = (
                b"d"
                if stat.S_ISDIR(mode)
                else b"f"
                if stat.S_ISREG(mode)
                else b"l"
                if stat.S_ISLNK(mode)
                else b"o"
            )
            found[path] = Entry(kind, st.st_size, int(st.st_mtime), path)
            if kind == b"d":
                stack.append(path)
    return found


def compare(entries: list[Entry], image: dict[bytes, Entry]) -> tuple[list[bytes], list[bytes]]:
    """The listed paths that differ from the image (new, another kind, size or mtime; new
    directories too), and the image's paths missing from the listing (parents before children,
    a deleted directory's contents not listed again). Fifos, sockets and devices are left out."""
    changed: list[bytes] = []
    present: set[bytes] = set()
    for entry in entries:
        if _pruned(entry.path):
            continue
        present.add(entry.path)
        if entry.kind == b"o":
            continue
        old = image.get(entry.path)
        if (
            old is None
            or old.kind != entry.kind
            or (entry.kind != b"d" and (old.size, old.mtime) != (entry.size, entry.mtime))
        ):
            changed.append(entry.path)
    deleted: list[bytes] = []
    gone_dirs: set[bytes] = set()
    for path in sorted(image):
        if path in present or _pruned(path):
            continue
        parent = path.rsplit(b"/", 1)[0]
        ancestors = set()
        while parent:
            ancestors.add(parent)
            parent = parent.rsplit(b"/", 1)[0]
        if ancestors & gone_dirs:
            continue
        deleted.append(path)
        if image[path].kind == b"d":
            gone_dirs.add(path)
    return changed, deleted
