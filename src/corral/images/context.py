"""Build contexts: unpacking an uploaded tar safely, and resolving COPY sources inside it.

A build context (or an uploaded OCI layout) arrives as a tar from an untrusted caller and is
unpacked into a private dir the daemon made. ``extract_tar`` writes only inside that dir:

- member names are relative paths without ``..`` components (absolute names, ``..`` and empty
  names refuse the whole archive);
- only regular files, dirs, symlinks and hard links are allowed (devices and fifos refuse it);
- a symlink must be relative and point inside the dir (from where it sits); a hard link must
  name a regular file unpacked earlier from the same archive and is written as a copy;
- no member is written through a symlink: every parent of a member must be a real dir;
- owners are not kept (all files belong to the daemon), setuid/setgid/sticky bits are dropped;
- the member count and the unpacked bytes are bounded (``ContextLimits``).

``resolve_source`` maps a COPY source (relative to the context; a leading ``/`` means the
context's root, as in docker) to a path inside the context, refusing ``..`` that climbs out and
symlinks that lead out. ``resolve_import`` does the same for an admin's import dir.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ContextError",
    "ContextLimits",
    "extract_tar",
    "resolve_import",
    "resolve_source",
]

_CHUNK = 1 << 20


class ContextError(ValueError):
    """An uploaded archive or a path in a build request is unsafe or over a limit."""


@dataclass(frozen=True)
class ContextLimits:
    max_bytes: int
    max_members: int


def _member_path(name: str) -> str:
    """The member's normalized relative path; raises for absolute names and ``..``."""
    if "\0" in name:
        raise ContextError(f"archive member {name!r}: the name holds a NUL byte")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ContextError(f"archive member {name!r}: absolute names are not allowed")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ContextError(f"archive member {name!r}: '..' is not allowed in member names")
    return "/".join(parts)


def _check_parents(root: Path, rel: str) -> Path:
    """``root/rel`` after making its parent dirs; refuses a parent that is not a real dir."""
    parent = root
    for part in rel.split("/")[:-1]:
        parent = parent / part
        try:
            st = os.lstat(parent)
        except FileNotFoundError:
            os.mkdir(parent, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise ContextError(f"archive member {rel!r}: {part!r} above it is not a directory")
    return root / rel


def _clear(path: Path) -> None:
    """Make room for a member that repeats an earlier name (later members win, as in tar)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise ContextError(f"archive member {path.name!r} replaces a directory")
    os.unlink(path)


def _write(path: Path, source: object, mode: int, budget: list[int]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode & 0o777)
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):  # type: ignore[attr-defined]
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise ContextError("the archive unpacks to more than the upload limit")
            out.write(chunk)


def extract_tar(archive: Path, dest: Path, limits: ContextLimits) -> int:
    """Unpack ``archive`` (tar, optionally compressed) into the empty private dir ``dest`` under
    the rules of the module docstring; returns the number of members. Raises ContextError (the
    caller removes ``dest``)."""
    root = dest
    budget = [limits.max_bytes]
    files: set[str] = set()
    count = 0
    try:
        tar = tarfile.open(archive, "r:*")  # noqa: SIM115 - closed below
    except (tarfile.TarError, OSError) as exc:
        raise ContextError(f"the upload is not a tar archive: {exc}") from exc
    with tar:
        try:
            for member in tar:
                count += 1
                if count > limits.max_members:
                    raise ContextError(
                        f"the archive has more than {limits.max_members} members (the limit)"
                    )
                rel = _member_path(member.name)
                if not rel:
                    continue  # the root itself ("./")
                if member.size > budget[0]:
                    raise ContextError(
                        f"archive member {rel!r} is larger than what is left of the limit"
                    )
                path = _check_parents(root, rel)
                if member.isdir():
                    try:
                        st = os.lstat(path)
                    except FileNotFoundError:
                        os.mkdir(path, 0o755)
                    else:
                        if not stat.S_ISDIR(st.st_mode):
                            raise ContextError(f"archive member {rel!r} replaces a file")
                    os.chmod(path, (member.mode & 0o777) | 0o700)
                elif member.isreg():
                    _clear(path)
                    source = tar.extractfile(member)
                    assert source is not None
                    _write(path, source, member.mode, budget)
                    files.add(rel)
                elif member.issym():
                    target = member.linkname
                    if target.startswith("/"):
                        raise ContextError(
                            f"archive member {rel!r} is a symlink to the absolute path "
                            f"{target!r}; only links inside the context are allowed"
                        )
                    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
                    if joined == ".." or joined.startswith("../"):
                        raise ContextError(
                            f"archive member {rel!r} is a symlink to {target!r}, outside the "
                            "context"
                        )
                    _clear(path)
                    os.symlink(target, path)
                elif member.islnk():
                    target = _member_path(member.linkname)
                    if target not in files:
                        raise ContextError(
                            f"archive member {rel!r} is a hard link to {member.linkname!r}, "
                            "which is not a file of this archive"
                        )
                    _clear(path)
                    with open(_check_parents(root, target), "rb") as src:
                        _write(path, src, member.mode, budget)
                    files.add(rel)
                else:
                    kind = "fifo" if member.isfifo() else "device" if member.isdev() else "special"
                    raise ContextError(
                        f"archive member {rel!r} is a {kind} file; only files, dirs and links "
                        "are allowed"
                    )
        except tarfile.TarError as exc:
            raise ContextError(f"the upload is not a valid tar archive: {exc}") from exc
    return count


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve_source(context: Path, src: str) -> Path:
    """The path of COPY source ``src`` inside ``context``; raises ContextError when it climbs
    out with ``..`` or leads out through a symlink."""
    depth = 0
    for part in src.split("/"):
        if part in ("", "."):
            continue
        depth += -1 if part == ".." else 1
        if depth < 0:
            raise ContextError(f"COPY source {src!r} climbs out of the build context")
    root = os.path.realpath(context)
    rel = posixpath.normpath("/" + src).lstrip("/")
    resolved = os.path.realpath(os.path.join(root, rel))
    if not _inside(resolved, root):
        raise ContextError(f"COPY source {src!r} leads out of the build context (a symlink)")
    return Path(resolved)


def resolve_import(import_dir: Path, path: str) -> Path:
    """``path`` (absolute) resolved with every symlink, if it is inside ``import_dir``."""
    root = os.path.realpath(import_dir)
    resolved = os.path.realpath(path)
    if not _inside(resolved, root) or resolved == root:
        raise ContextError(f"{path} is not inside the import dir {import_dir}")
    if not os.path.exists(resolved):
        raise ContextError(f"{path} does not exist in the import dir {import_dir}")
    return Path(resolved)
