"""Directory watches: inotify (through ctypes, loaded at the first watch) turned into events.

A watch has an id, a root directory and, if recursive, every directory below it (new ones are
added as they appear). One thread per watch reads its inotify descriptor and appends events
``{"name": path relative to the root, "type": create|write|remove|rename|chmod, "dir": bool}``
to a bounded queue (the oldest are dropped past ``MAX_EVENTS``, and counted); ``take`` hands
them out, waiting up to a given time for the first. The mapping follows fsnotify (what E2B's
envd uses): created or moved in -> create, modified -> write, deleted -> remove, moved out ->
rename, attributes -> chmod. The agent writes a file as a hidden temporary file renamed into
place (``files.receive_file``); such temporaries are not reported, and their rename into place
is reported as the create and write of the file, as a direct write would be.

Bounds: at most ``MAX_WATCHES`` watches per agent and ``MAX_DIRS`` directories per watch (a
recursive watch of a larger tree is refused). ``Watches`` guards its table with a lock; a
``Watch`` guards its queue with its condition.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import select
import struct
import threading
from typing import Any

from .errors import ApiError, bad_request

MAX_WATCHES = 64
MAX_DIRS = 4096
MAX_EVENTS = 4096
MAX_WAIT = 60.0

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
WATCHED = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
WATCHED |= IN_DELETE_SELF
KINDS = (
    (IN_CREATE | IN_MOVED_TO, "create"),
    (IN_MODIFY, "write"),
    (IN_DELETE, "remove"),
    (IN_MOVED_FROM, "rename"),
    (IN_ATTRIB, "chmod"),
)
HEADER = struct.Struct("iIII")
UPLOAD_MARK = ".corral-upload-"  # files.receive_file's temporaries: ".NAME.corral-upload-HEX"

_libc: Any = None


def libc() -> Any:
    global _libc
    if _libc is None:
        import ctypes

        # The interpreter's own symbols, libc's among them: no library search (find_library
        # would run ldconfig), and the agent's private root has that libc.
        found = ctypes.CDLL(None, use_errno=True)
        found.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc = (found, ctypes)
    return _libc


class Watch:
    """One inotify descriptor and its directories; see the module docstring."""

    def __init__(self, watch_id: int, root: str, recursive: bool) -> None:
        found, ctypes = libc()
        self.id = watch_id
        self.root = root
        self.recursive = recursive
        self.cond = threading.Condition()
        self.events: collections.deque[dict[str, Any]] = collections.deque()
        self.dropped = 0
        self.closed = False
        fd = found.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise ApiError(409, "conflict", f"cannot watch {root}: inotify: {os.strerror(err)}")
        self.fd = fd
        self.dirs: dict[int, str] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._fds_open = True  # guarded by cond: close() never writes to a reused descriptor
        self._upload_cookies: collections.deque[int] = collections.deque(maxlen=64)
        try:
            self._add(root, "", strict=True)
            if recursive:
                self._add_below(root, "")
        except BaseException:
            self._close_fds()
            raise
        threading.Thread(target=self._read_forever, name=f"watch-{watch_id}", daemon=True).start()

    def _add(self, path: str, rel: str, strict: bool = False) -> None:
        if len(self.dirs) >= MAX_DIRS:
            raise ApiError(
                413, "too_large", f"watching {self.root}: more than {MAX_DIRS} directories"
            )
        found, ctypes = libc()
        wd = found.inotify_add_watch(self.fd, os.fsencode(path), WATCHED | IN_ONLYDIR)
        if wd < 0:
            err = ctypes.get_errno()
            if not strict:
                return  # gone or unreadable meanwhile: nothing to watch there
            if err == 20:  # ENOTDIR
                raise bad_request(f"{path} is not a directory")
            status, code = (404, "not_found") if err == 2 else (400, "bad_request")
            raise ApiError(status, code, f"watching {path}: {os.strerror(err)}")
        self.dirs[wd] = rel

    def _add_below(self, path: str, rel: str, found: list[dict[str, Any]] | None = None) -> None:
        """Watch the directories below ``path``; with ``found`` (a directory that just
        appeared), also report what is already in it: it may have filled before its watch."""
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            inner = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if found is not None:
                found.append({"name": inner, "type": "create", "dir": is_dir})
            if is_dir:
                self._add(entry.path, inner)
                self._add_below(entry.path, inner, found)

    def _read_forever(self) -> None:
        try:
            while not self.closed:
                ready, _, _ = select.select([self.fd, self._wake_r], [], [])
                if self._wake_r in ready:
                    return
                try:
                    data = os.read(self.fd, 65536)
                except BlockingIOError:
                    continue
                if self._parse(data):
                    return  # the watched directory is gone: the watch has ended
        except OSError:
            pass
        finally:
            with self.cond:
                self.closed = True
                self.cond.notify_all()
            self._close_fds()

    def _parse(self, data: bytes) -> bool:
        """Queue the events in ``data``; True when the root directory's watch ended."""
        offset, found, ended = 0, [], False
        while offset + HEADER.size <= len(data):
            wd, mask, cookie, size = HEADER.unpack_from(data, offset)
            raw = data[offset + HEADER.size : offset + HEADER.size + size]
            offset += HEADER.size + size
            name = os.fsdecode(raw.split(b"\0", 1)[0])
            if mask & IN_Q_OVERFLOW:
                self.dropped += 1
                continue
            rel = self.dirs.get(wd)
            if mask & IN_IGNORED:
                self.dirs.pop(wd, None)
                ended = ended or rel == ""
                continue
            if rel is None:
                continue
            if mask & IN_DELETE_SELF:
                if rel == "":
                    found.append({"name": "", "type": "remove", "dir": True})
                continue
            path = f"{rel}/{name}" if rel else name
            is_dir = bool(mask & IN_ISDIR)
            if name.startswith(".") and UPLOAD_MARK in name:
                if mask & IN_MOVED_FROM:
                    self._upload_cookies.append(cookie)
                continue
            if mask & IN_MOVED_TO and cookie in self._upload_cookies:
                self._upload_cookies.remove(cookie)
                found.append({"name": path, "type": "create", "dir": False})
                found.append({"name": path, "type": "write", "dir": False})
                continue
            for bits, kind in KINDS:
                if mask & bits:
                    found.append({"name": path, "type": kind, "dir": is_dir})
            if self.recursive and is_dir and mask & (IN_CREATE | IN_MOVED_TO):
                full = os.path.join(self.root, path)
                try:
                    self._add(full, path)
                    self._add_below(full, path, found)
                except ApiError:
                    self.dropped += 1  # past MAX_DIRS: the new tree is not watched
        if found:
            with self.cond:
                for event in found:
                    if len(self.events) >= MAX_EVENTS:
                        self.events.popleft()
                        self.dropped += 1
                    self.events.append(event)
                self.cond.notify_all()
        return ended

    def take(self, wait: float) -> dict[str, Any]:
        """The events queued (waiting up to ``wait`` s for one), emptied; the drop count."""
        with self.cond:
            if not self.events and not self.closed and wait > 0:
                self.cond.wait(min(wait, MAX_WAIT))
            events = list(self.events)
            self.events.clear()
            dropped, self.dropped = self.dropped, 0
            return {"events": events, "dropped": dropped, "closed": self.closed}

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            if self._fds_open:
                os.write(self._wake_w, b"x")  # the reader thread closes the descriptors

    def _close_fds(self) -> None:
        with self.cond:
            if not self._fds_open:
                return
            self._fds_open = False
            for fd in (self.fd, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


class Watches:
    """The agent's watches by id (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.table: dict[int, Watch] = {}
        self.ids = itertools.count(1)

    def create(self, path: str, recursive: bool) -> Watch:
        with self.lock:
            if len(self.table) >= MAX_WATCHES:
                raise ApiError(
                    409, "conflict", f"at most {MAX_WATCHES} watches at once: remove one first"
                )
            watch = Watch(next(self.ids), path, recursive)
            self.table[watch.id] = watch
            return watch

    def get(self, watch_id: int) -> Watch:
        with self.lock:
            watch = self.table.get(watch_id)
        if watch is None:
            raise ApiError(404, "not_found", f"no watch {watch_id}")
        return watch

    def remove(self, watch_id: int) -> None:
        with self.lock:
            watch = self.table.pop(watch_id, None)
        if watch is None:
            raise ApiError(404, "not_found", f"no watch {watch_id}")
        watch.close()
