"""Unpacking one OCI layer blob into a layer dir without ever touching the host outside it.

The layer is hostile input. Every member's parent dir is resolved *inside* the layer dir with
``openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`` (the layer's own symlinks
are followed as if the layer dir were ``/``, so ``x -> /etc`` then ``x/cron.d/y`` lands in
``<layer>/etc/cron.d/y``), and the member itself is made relative to that parent's fd
(``mkdirat``, ``openat(O_CREAT|O_EXCL|O_NOFOLLOW)``, ``symlinkat``, ``linkat``, ``mknodat``) with
its owner, mode and times set through an fd of the new entry or ``AT_SYMLINK_NOFOLLOW``, never
through a joined path. An existing entry of the same name (of this layer) is replaced, never
followed. What that means for each kind of member:

- symlinks are stored as they are (absolute or relative): they are resolved only inside the
  sandbox later;
- hard links must name an earlier member of this layer (resolved in the layer root; the link is
  made to that entry itself, a symlink is not followed);
- names with a ``..`` component are refused; absolute names are taken relative to the layer;
- device nodes are *not* made on the host (gVisor gives every sandbox its own ``/dev``): they
  are skipped and counted in ``UnpackedLayer.skipped_devices``;
- setuid/setgid bits and numeric owners are kept (images need them); the host never executes
  them: the store is 0700 and its views are mounted ``nosuid,nodev``;
- OCI whiteouts (``.wh.NAME``, ``.wh..wh..opq``) become overlayfs ones (a 0/0 character device,
  the ``trusted.overlay.opaque`` xattr) in the member's resolved parent.

In the same pass the blob is verified (``layer_blob.py``): the sha256 of the compressed bytes
must be the manifest's layer digest and the sha256 of the uncompressed tar the config's diff id,
and the uncompressed size and the member count are bounded (``LayerLimits``). On any failure the
layer dir is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.images.layer_blob import CHUNK, Digesting, decompressor
from corral.images.oci import ImageImportError

__all__ = ["LayerLimits", "UnpackedLayer", "unpack_layer"]

_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_RESOLVE = _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_OPAQUE_XATTR = "trusted.overlay.opaque"
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class LayerLimits:
    """Bounds of one layer: bytes of its uncompressed tar stream and number of members."""

    max_bytes: int = 16 * 2**30
    max_members: int = 1_000_000


@dataclass(frozen=True)
class UnpackedLayer:
    """A layer unpacked into ``path`` whose blob had both expected digests."""

    path: Path
    diff_id: str
    members: int
    size: int
    skipped_devices: int


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: Any = None


def _openat2(root_fd: int, path: str, flags: int) -> int:
    """``openat2(root_fd, path, flags, RESOLVE_IN_ROOT|...)``: ``path`` resolved with
    ``root_fd`` as ``/``; raises OSError like ``os.open``."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    how = _OpenHow(flags, 0, _RESOLVE)
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise OSError(errno.EINVAL, "embedded NUL byte in name", path)
    fd = int(_libc.syscall(_SYS_OPENAT2, root_fd, raw, ctypes.byref(how), ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            raise ImageImportError("unpacking layers needs openat2 (Linux 5.6 or newer)")
        raise OSError(err, os.strerror(err), path)
    return fd


def _parts(name: str, what: str) -> list[str]:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageImportError(f"{what} has a '..' component")
    return parts


def _remove_entry(parent: int, name: str) -> None:
    """Remove ``name`` in dir fd ``parent`` (a tree is removed without following symlinks)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent)
    else:
        os.unlink(name, dir_fd=parent)


def _set_meta(fd: int, member: tarfile.TarInfo) -> None:
    # chown before chmod: chown clears setuid/setgid bits.
    os.fchown(fd, member.uid, member.gid)
    os.fchmod(fd, member.mode & 0o7777)
    os.utime(fd, (member.mtime, member.mtime))


class _Unpacker:
    """One layer's unpacking state: the root fd, counters and the deferred dir times."""

    def __init__(self, root_fd: int, label: str, limits: LayerLimits) -> None:
        self.root = root_fd
        self.label = label
        self.limits = limits
        self.members = 0
        self.size = 0
        self.skipped_devices = 0
        self.skipped: set[tuple[str, ...]] = set()
        self.dir_times: list[tuple[str, float]] = []

    def parent(self, parts: list[str]) -> int:
        """An fd of the dir ``parts`` resolved in the root, making missing dirs (0755, root)."""
        if not parts:
            return os.dup(self.root)
        with contextlib.suppress(FileNotFoundError):
            return _openat2(self.root, "/".join(parts), _DIR_FLAGS)
        fd = os.dup(self.root)
        try:
            for i, part in enumerate(parts):
                try:
                    nxt = _openat2(self.root, "/".join(parts[: i + 1]), _DIR_FLAGS)
                except FileNotFoundError:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        raise ImageImportError(
                            f"{'/'.join(parts[: i + 1])!r} is a symlink to a missing dir"
                        ) from None
                    nxt = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                    os.fchmod(nxt, 0o755)
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def add(self, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ImageImportError(
                f"unpacking layer {self.label}: more than {self.limits.max_members} members "
                "(the per-layer member limit)"
            )
        parts = _parts(member.name, "its name")
        if not parts:  # the layer's own "/": its owner and mode
            if not member.isdir():
                raise ImageImportError("it names the layer root but is not a directory")
            _set_meta(self.root, member)
            return
        base = parts[-1]
        parent = self.parent(parts[:-1])
        try:
            if base.startswith(_WHITEOUT):
                self.whiteout(parent, base)
            elif member.isdir():
                self.directory(parent, base, member, parts)
            elif member.isreg():
                self.regular(parent, base, member, archive)
            elif member.issym():
                _remove_entry(parent, base)
                os.symlink(member.linkname, base, dir_fd=parent)
                os.chown(base, member.uid, member.gid, dir_fd=parent, follow_symlinks=False)
                times = (member.mtime, member.mtime)
                os.utime(base, times, dir_fd=parent, follow_symlinks=False)
            elif member.islnk():
                self.hardlink(parent, base, member, parts)
            elif member.isfifo():
                _remove_entry(parent, base)
                os.mkfifo(base, 0o600, dir_fd=parent)
                fd = os.open(base, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=parent)
                try:
                    _set_meta(fd, member)
                finally:
                    os.close(fd)
            elif member.isdev():
                self.skipped_devices += 1
                self.skipped.add(tuple(parts))
            else:
                raise ImageImportError(f"its type {member.type!r} is not supported")
        finally:
            os.close(parent)

    def whiteout(self, parent: int, base: str) -> None:
        if base == _OPAQUE:
            os.setxattr(parent, _OPAQUE_XATTR, b"y")
            return
        hidden = base[len(_WHITEOUT) :]
        if hidden in ("", ".", ".."):
            raise ImageImportError(f"whiteout {base!r} names no entry")
        _remove_entry(parent, hidden)
        os.mknod(hidden, 0o600 | stat.S_IFCHR, os.makedev(0, 0), dir_fd=parent)

    def directory(self, parent: int, base: str, member: tarfile.TarInfo, parts: list[str]) -> None:
        try:
            os.mkdir(base, 0o700, dir_fd=parent)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(base, dir_fd=parent, follow_symlinks=False).st_mode):
                _remove_entry(parent, base)
                os.mkdir(base, 0o700, dir_fd=parent)
        fd = os.open(base, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        try:
            _set_meta(fd, member)
        finally:
            os.close(fd)
        self.dir_times.append(("/".join(parts), member.mtime))

    def regular(
        self, parent: int, base: str, member: tarfile.TarInfo, archive: tarfile.TarFile
    ) -> None:
        _remove_entry(parent, base)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(base, flags, 0o600, dir_fd=parent)
        with open(fd, "wb", closefd=True) as out:
            src = archive.extractfile(member)
            assert src is not None
            shutil.copyfileobj(src, out, CHUNK)
            out.flush()
            _set_meta(fd, member)
        self.size += member.size

    def hardlink(self, parent: int, base: str, member: tarfile.TarInfo, parts: list[str]) -> None:
        target = _parts(member.linkname, f"its hard link target {member.linkname!r}")
        if not target:
            raise ImageImportError("it is a hard link to the layer root")
        if tuple(target) in self.skipped:  # a link to a skipped device node
            self.skipped_devices += 1
            self.skipped.add(tuple(parts))
            return
        if target == parts:
            return
        src_parent = _openat2(self.root, "/".join(target[:-1]) or ".", _DIR_FLAGS)
        try:
            src = os.stat(target[-1], dir_fd=src_parent, follow_symlinks=False)
            if stat.S_ISDIR(src.st_mode):
                raise ImageImportError(f"it is a hard link to the directory {member.linkname!r}")
            _remove_entry(parent, base)
            os.link(
                target[-1], base, src_dir_fd=src_parent, dst_dir_fd=parent, follow_symlinks=False
            )
        finally:
            os.close(src_parent)

    def finish(self) -> None:
        """Set the dirs' times last (their entries changed them), deepest first."""
        for path, mtime in reversed(self.dir_times):
            try:
                fd = _openat2(self.root, path, _DIR_FLAGS | os.O_NOFOLLOW)
            except OSError:
                continue  # replaced by a later member
            try:
                os.utime(fd, (mtime, mtime))
            finally:
                os.close(fd)


def unpack_layer(
    blob: Path,
    dest: Path,
    *,
    digest: str,
    diff_id: str,
    limits: LayerLimits | None = None,
) -> UnpackedLayer:
    """Unpack the layer ``blob`` (tar, gzip, bzip2 or xz) into the new dir ``dest``, checking
    that the blob's sha256 is ``digest`` and its uncompressed tar's is ``diff_id``. Raises
    ImageImportError (and leaves no ``dest``) for a refused member, a digest mismatch or a limit.
    Blocking: call it in a thread."""
    limits = limits or LayerLimits()
    label = diff_id[:19]
    dest.mkdir()
    try:
        dest.chmod(0o755)  # the layer's root is its image's "/" (a "./" member may change it)
        root_fd = os.open(dest, _DIR_FLAGS | os.O_NOFOLLOW)
        try:
            unpacker = _Unpacker(root_fd, label, limits)
            with open(blob, "rb") as raw:
                head = raw.read(8)
                raw.seek(0)
                compressed = Digesting(raw)
                too_big = (
                    f"unpacking layer {label}: it unpacks to more than {limits.max_bytes} bytes "
                    "(the per-layer size limit)"
                )
                tar = decompressor(compressed, head, label)
                plain = Digesting(tar, limits.max_bytes, too_big)
                _unpack_members(plain, unpacker, label)
                plain.drain()  # the tar's end blocks belong to the diff id too
                compressed.drain()
            unpacker.finish()
        finally:
            os.close(root_fd)
        if compressed.digest() != digest:
            raise ImageImportError(
                f"unpacking layer {label}: the blob's digest is {compressed.digest()}, "
                f"not the manifest's {digest}; the image is corrupt or was tampered with"
            )
        if plain.digest() != diff_id:
            raise ImageImportError(
                f"unpacking layer {label}: its uncompressed digest is {plain.digest()}, "
                f"not the config's diff id {diff_id}; the image is corrupt or was tampered with"
            )
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return UnpackedLayer(dest, diff_id, unpacker.members, unpacker.size, unpacker.skipped_devices)


def _unpack_members(stream: Digesting, unpacker: _Unpacker, label: str) -> None:
    member: tarfile.TarInfo | None = None
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:  # type: ignore[call-overload]
            while (member := archive.next()) is not None:
                unpacker.add(archive, member)
                archive.members.clear()  # a stream needs no index; keep memory flat
    except (ImageImportError, OSError, ValueError, OverflowError) as exc:
        if str(exc).startswith("unpacking layer"):
            raise
        where = f"member {member.name!r}: " if member is not None else ""
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and member is not None and member.islnk():
            detail += f" (hard link to {member.linkname!r}, resolved inside the layer)"
        raise ImageImportError(f"unpacking layer {label}: {where}{detail}") from exc
    except (tarfile.TarError, EOFError) as exc:
        raise ImageImportError(f"unpacking layer {label}: not a valid tar: {exc}") from exc
