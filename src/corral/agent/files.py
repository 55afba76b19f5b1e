"""Files: protocol paths, the file operations, and streamed downloads and uploads.

Paths travel as text; towards the kernel they are bytes, with names that are not valid UTF-8
carried as surrogateescape. ``resolve_path`` normalises a protocol path as text (so ``..`` stays
inside the sandbox's root) and returns it both ways. Every ``OSError`` leaves this module as an
``ApiError`` saying what was being done. Uploads never leave a half-written file behind: the body
goes to a temporary file in the same directory, which is fsynced and renamed over the target.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from .errors import ApiError, bad_request, os_error
from .wire import FILE_CHUNK, MAX_JSON_BODY, parse_flag, parse_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .http import Connection


# -- paths: strings in the protocol, bytes towards the kernel ---------------------------------


def fs_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def fs_str(path: bytes) -> str:
    return path.decode("utf-8", "surrogateescape")


def resolve_path(value: object) -> tuple[str, bytes]:
    """Return the absolute, normalised form of a protocol path as (text, bytes)."""
    if not isinstance(value, str) or not value:
        raise bad_request("a non-empty 'path' is required")
    if "\x00" in value:
        raise bad_request(f"path {value!r} contains a NUL byte")
    path = posixpath.normpath(posixpath.join("/", value))
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    try:
        return path, fs_bytes(path)
    except UnicodeEncodeError:
        raise bad_request(f"path {value!r} is not valid UTF-8 or surrogateescape") from None


def stat_entry(path: str, st: os.stat_result, raw: bytes) -> dict[str, Any]:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        kind = "file"
    elif stat.S_ISDIR(mode):
        kind = "dir"
    elif stat.S_ISLNK(mode):
        kind = "symlink"
    else:
        kind = "other"
    target = None
    if kind == "symlink":
        try:
            target = fs_str(os.readlink(raw))
        except OSError:
            target = None
    return {
        "name": posixpath.basename(path) or "/",
        "path": path,
        "type": kind,
        "size": st.st_size,
        "mode": stat.S_IMODE(mode),
        "mtime": st.st_mtime,
        "target": target,
    }


# -- file operations -------------------------------------------------------------------------


def file_stat(path: str, raw: bytes) -> dict[str, Any]:
    try:
        return stat_entry(path, os.lstat(raw), raw)
    except OSError as exc:
        raise os_error(exc, f"stat {path!r}") from None


def list_dir(path: str, raw: bytes, depth: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []

    def walk(dir_path: str, dir_raw: bytes, level: int) -> None:
        try:
            with os.scandir(dir_raw) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if level == 1:
                raise os_error(exc, f"listing {dir_path!r}") from None
            return  # a subdirectory we cannot read (or that vanished) is listed but not entered
        base = dir_path.rstrip("/")
        for entry in children:
            child = f"{base}/{fs_str(entry.name)}"
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append(stat_entry(child, st, entry.path))
            if level < depth and stat.S_ISDIR(st.st_mode):
                walk(child, entry.path, level + 1)

    walk(path, raw, 1)
    return entries


def make_dir(path: str, raw: bytes, parents: bool) -> bool:
    existed = os.path.isdir(raw)
    try:
        if parents:
            os.makedirs(raw, exist_ok=True)
        else:
            os.mkdir(raw)
    except FileExistsError:
        if os.path.isdir(raw):
            return False
        message = f"creating directory {path!r}: a non-directory exists there"
        raise ApiError(409, "exists", message) from None
    except OSError as exc:
        raise os_error(exc, f"creating directory {path!r}") from None
    return not existed


def move_path(src: str, src_raw: bytes, dst: str, dst_raw: bytes) -> dict[str, Any]:
    try:
        try:
            os.rename(src_raw, dst_raw)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            import shutil

            shutil.move(fs_str(src_raw), fs_str(dst_raw))
    except OSError as exc:
        raise os_error(exc, f"moving {src!r} to {dst!r}") from None
    return file_stat(dst, dst_raw)


def remove_path(path: str, raw: bytes, recursive: bool) -> None:
    if path == "/":
        raise bad_request("refusing to remove '/'")
    try:
        st = os.lstat(raw)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(raw)
        elif recursive:
            import shutil

            shutil.rmtree(raw)
        else:
            os.rmdir(raw)
    except OSError as exc:
        err = os_error(exc, f"removing {path!r}")
        if exc.errno == errno.ENOTEMPTY:
            err.message += " (pass recursive=true to remove its contents)"
        raise err from None


# -- content ----------------------------------------------------------------------------------


def send_file(conn: Connection, path: str, raw: bytes) -> None:
    """Answer ``GET /files/content``: the file's bytes with their length, by ``sendfile``."""
    try:
        # O_NONBLOCK: opening a FIFO must not hang this thread waiting for a writer.
        fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise os_error(exc, f"reading {path!r}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ApiError(400, "is_a_directory", f"reading {path!r}: Is a directory")
        raise bad_request(f"reading {path!r}: not a regular file")
    os.set_blocking(fd, True)
    with open(fd, "rb") as f:
        small = b""
        if st.st_size == 0:  # /proc and /sys files report 0 but have content: read it whole
            try:
                small = f.read(MAX_JSON_BODY + 1)
            except OSError as exc:
                raise os_error(exc, f"reading {path!r}") from None
            if len(small) > MAX_JSON_BODY:
                raise bad_request(f"reading {path!r}: reports size 0 but keeps growing")
        size = st.st_size or len(small)
        head = conn.head(
            200,
            [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))],
        )
        if small or not size:
            conn.wfile.write(head + small)
            return
        conn.wfile.write(head)
        sent = 0
        try:
            while sent < size:
                count = os.sendfile(conn.connection.fileno(), f.fileno(), sent, size - sent)
                if not count:
                    break
                sent += count
        except OSError:
            conn.close_connection = True
            return
        if sent != size:  # the file shrank under us: the framing is broken, drop the line
            conn.close_connection = True


def receive_file(conn: Connection, path: str, raw: bytes) -> None:
    """Answer ``PUT /files/content``: stream the body to a temporary file, fsync, rename."""
    assert conn.body is not None
    mode_value = conn.query.get("mode")
    mode = parse_int(mode_value, "mode") if mode_value not in (None, "") else None
    parents = parse_flag(conn.query, "parents", False)
    directory, name = posixpath.split(raw)
    if not name:
        raise bad_request(f"writing {path!r}: not a file path")
    try:
        if parents:
            os.makedirs(directory, exist_ok=True)
        try:
            st = os.stat(raw)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if mode is None:
                mode = stat.S_IMODE(st.st_mode)
        temp = b"%b/.%b.corral-upload-%b" % (
            directory,
            name[:64],
            os.urandom(6).hex().encode(),
        )
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise os_error(exc, f"writing {path!r}") from None
    size = 0
    try:
        try:
            while data := conn.body.read(FILE_CHUNK):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                size += len(data)
            os.fchmod(fd, 0o644 if mode is None else mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, raw)
    except BaseException as exc:
        try:  # noqa: SIM105 (contextlib is not imported by the agent)
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
            raise os_error(exc, f"writing {path!r}") from None
        raise
    try:
        dir_fd = os.open(directory or b"/", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass  # the data is safe; the rename's durability is best effort
    conn.send_json(200, {"path": path, "size": size})
