"""corral in-sandbox agent: the init (PID 1) of a sandbox, serving docs/agent-protocol.md.

It runs on the host's interpreter bind-mounted read-only into the sandbox, started as
``python -I -S agent.py``: standard library only, one file, nothing read from the image except the
programs it is asked to run. Configuration comes from the environment: ``CORRAL_AGENT_PORT``
(default 49983) and ``CORRAL_AGENT_HOST`` (default 0.0.0.0); every other variable it was started
with is the default environment of the processes it starts (``PUT /config`` replaces it).

Threads:
- main: the HTTP accept loop (``AgentServer``, one thread per keep-alive connection);
- reaper: the only caller of ``waitpid`` in this process. As PID 1 (or a child subreaper when run
  elsewhere) every orphan in the sandbox becomes our child, so it waits for ``-1`` and matches the
  pid against the process table; unknown pids are orphans and are simply reaped;
- pipe readers: one per open output pipe, taken from a pool of reused threads, started on
  demand (none ahead: the agent's start is on the critical path of every sandbox creation);
- deadlines: one thread, started with the first timeout, that kills the process groups whose
  timeout ran out.

Locking: ``Agent.lock`` guards the process table and is held across the spawn so the reaper, which
looks a reaped pid up under the same lock, matches a child that exits before it was registered.
Each ``Process.cond`` guards that process's event log, its followers' cursors and its exit state.
Lock order: ``Agent.lock`` before ``Process.cond``; ``Process.stdin_lock`` is never taken while
holding either.

Output: each process keeps an event log (seq 0 is ``start``; output chunks follow; ``exit`` comes
last, once both pipes reached EOF and the process was reaped). The log retains the last 16 MiB of
output. While a follower is attached and has not yet taken the oldest chunk, the pipe reader waits
for it (up to 30 s) instead of dropping, so a live stream is lossless and a fast producer is slowed
to the reader's pace; with nobody attached, old chunks are dropped and later reported as
``truncated``.

Nothing here depends on wall time surviving a checkpoint/restore except reported timestamps; the
listening socket stays open across it.
"""

from __future__ import annotations

# Imports cost milliseconds each inside gVisor (every module file and every extension's pages
# come through the sandbox's file system), and the agent's start is on the critical path of
# every sandbox creation. So only what the first requests need is imported here; everything
# else (subprocess, pwd, shutil, signal names, traceback, heapq, bisect, weakref) is imported
# where it is first used. JSON and sockets come from the C modules under ``json`` and
# ``socket`` (those two pull in re, enum, selectors...): see ``json_loads`` and ``Handler``.
import _json
import _signal
import _socket
import binascii
import collections
import errno
import io
import itertools
import os
import posixpath
import stat
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    import weakref
    from typing import IO, Any, BinaryIO

VERSION = "1"
DEFAULT_PORT = 49983
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_PREFIX = "CORRAL_AGENT_"

RETAIN_BYTES = 16 * 1024 * 1024  # output kept per process
PIPE_READ = 64 * 1024  # a Linux pipe holds 64 KiB, a bigger read gains nothing
FILE_CHUNK = 1024 * 1024  # file transfers and request bodies move in 1 MiB pieces
BATCH_BYTES = 1024 * 1024  # output a follower takes per write
FOLLOWER_STALL = 30.0  # how long a pipe reader waits for a lagging follower before dropping
ORPHAN_POLL = 1.0  # with no child of ours alive, how often to look for re-parented orphans
DROP_INDEX_MAX = 4096  # (seq, bytes) points remembered for dropped chunks
MAX_JSON_BODY = 16 * 1024 * 1024


class ApiError(Exception):
    """An error answered to the client as ``{"error": message, "code": code}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


_ERRNO_CODES = {
    errno.ENOENT: (404, "not_found"),
    errno.EISDIR: (400, "is_a_directory"),
    errno.ENOTDIR: (400, "not_a_directory"),
    errno.EEXIST: (409, "exists"),
    errno.ENOTEMPTY: (409, "conflict"),
    errno.EBUSY: (409, "conflict"),
    errno.EACCES: (403, "permission_denied"),
    errno.EPERM: (403, "permission_denied"),
    errno.EROFS: (403, "permission_denied"),
    errno.ENOSPC: (507, "no_space"),
    errno.EDQUOT: (507, "no_space"),
    errno.ENAMETOOLONG: (400, "bad_request"),
    errno.ELOOP: (400, "bad_request"),
    errno.EINVAL: (400, "bad_request"),
}


def os_error(exc: OSError, doing: str) -> ApiError:
    """Translate ``exc`` into an ApiError whose message says what was being done (and to what)."""
    status, code = _ERRNO_CODES.get(exc.errno or 0, (500, "internal"))
    return ApiError(status, code, f"{doing}: {exc.strerror or exc}")


# ---------------------------------------------------------------------------------------------
# Paths: strings in the protocol, bytes towards the kernel (non-UTF-8 bytes as surrogateescape).


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


# ---------------------------------------------------------------------------------------------
# Files


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


# ---------------------------------------------------------------------------------------------
# Processes


class _JsonContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: the defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
    parse_constant = parse_constant.__getitem__  # type: ignore[assignment]


_scan_json = _json.make_scanner(_JsonContext())  # type: ignore[arg-type]
_JSON_SPACE = " \t\n\r"


def _not_serializable(value: object) -> None:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_dumps(value: Any) -> bytes:
    """``json.dumps(value, separators=(",", ":")).encode()``, by json's own C encoder."""
    encode = _json.make_encoder(
        None, _not_serializable, _json.encode_basestring_ascii, None, ":", ",", False, False, True
    )
    return "".join(encode(value, 0)).encode()


def json_loads(raw: bytes) -> Any:
    """``json.loads(raw)``, by json's own C scanner; anything unusual (not UTF-8, a BOM, an
    error to explain) is handed to the json module itself."""
    try:
        text = raw.decode("utf-8")
        start = len(text) - len(text.lstrip(_JSON_SPACE))
        value, end = _scan_json(text, start)
        if not text[end:].strip(_JSON_SPACE):
            return value
    except (ValueError, StopIteration):
        pass
    import json

    return json.loads(raw)


def _json_line(event: dict[str, Any]) -> bytes:
    return json_dumps(event) + b"\n"


class Process:
    """One process started through the agent, with its event log and followers.

    Invariants (all under ``cond``): retained output events have the contiguous seqs
    ``first_seq .. next_seq-1``; every seq below ``first_seq`` (except 0, ``start``) was dropped;
    ``exit_seq`` is set exactly once, when ``open_pipes`` is 0 and ``reaped`` is true, and it is
    the last seq ever given out. ``followers`` maps a follower id to ``[cursor, blocking]``: the
    last seq it took, and whether a pipe reader waits for it before dropping.
    """

    def __init__(self, child: Child, cmd: list[str], tag: Any) -> None:
        self.child = child  # its returncode is set by the reaper
        self.pid = child.pid
        self.cmd = cmd
        self.tag = tag
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.cond = threading.Condition()
        self.stdin_lock = threading.Lock()
        self.events: collections.deque[tuple[int, bytes, bytes]] = collections.deque()
        self.first_seq = 1
        self.next_seq = 1
        self.retained = 0
        self.dropped_total = 0
        self.drop_seqs: list[int] = []  # seqs of dropped chunks (thinned past DROP_INDEX_MAX)
        self.drop_totals: list[int] = []  # dropped_total right after that chunk was dropped
        self.followers: dict[int, list[Any]] = {}
        self.readers_waiting = 0
        self.open_pipes = 2
        self.reaped = False
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.timed_out = False
        self.exit_seq: int | None = None

    # -- producers ---------------------------------------------------------------------------

    def append_output(self, kind: bytes, data: bytes) -> None:
        """Called by a pipe reader; may wait for a lagging follower (backpressure)."""
        with self.cond:
            deadline: float | None = None
            while self.events and self.retained + len(data) > RETAIN_BYTES:
                oldest = self.events[0][0]
                behind = [f for f in self.followers.values() if f[1] and f[0] < oldest]
                if behind:
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + FOLLOWER_STALL
                    if now < deadline:
                        self.readers_waiting += 1
                        self.cond.wait(deadline - now)
                        self.readers_waiting -= 1
                        continue
                    for follower in behind:
                        follower[1] = False  # it stalled too long: stop waiting for it
                self._drop_oldest()
            self.events.append((self.next_seq, kind, data))
            self.next_seq += 1
            self.retained += len(data)
            self.cond.notify_all()

    def _drop_oldest(self) -> None:
        seq, _, data = self.events.popleft()
        self.retained -= len(data)
        self.dropped_total += len(data)
        self.first_seq = seq + 1
        self.drop_seqs.append(seq)
        self.drop_totals.append(self.dropped_total)
        if len(self.drop_seqs) >= DROP_INDEX_MAX:  # thin out, keeping the newest point
            self.drop_seqs = self.drop_seqs[1::2]
            self.drop_totals = self.drop_totals[1::2]

    def pipe_closed(self) -> None:
        with self.cond:
            self.open_pipes -= 1
            self._finish_if_done()

    def on_reaped(self, status: int) -> None:
        with self.cond:
            self.reaped = True
            self.ended_at = time.time()
            if os.WIFSIGNALED(status):
                self.signal = os.WTERMSIG(status)
            else:
                self.exit_code = os.WEXITSTATUS(status)
            self.child.set_returncode(os.waitstatus_to_exitcode(status))
            self._finish_if_done()
        self._close_stdin_if_idle()

    def _finish_if_done(self) -> None:
        if self.exit_seq is None and self.reaped and self.open_pipes == 0:
            self.exit_seq = self.next_seq
            self.next_seq += 1
            self.cond.notify_all()

    def _close_stdin_if_idle(self) -> None:
        # A writer blocked in write() holds stdin_lock; it sees EPIPE and the pipe is closed on
        # forget instead.
        if self.stdin_lock.acquire(blocking=False):
            try:
                if self.child.stdin is not None:
                    self.child.stdin.close()
            finally:
                self.stdin_lock.release()

    # -- control -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.exit_seq is None

    def kill_group(self, signum: int, *, timed_out: bool = False) -> bool:
        """Signal the process group; False if the process has already finished."""
        with self.cond:
            # The group id stays ours while anything in the group (which holds our pipes) lives.
            if self.exit_seq is not None:
                return False
            if timed_out:
                self.timed_out = True
            try:  # noqa: SIM105 (contextlib is not imported by the agent)
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass
            return True

    def on_timeout(self) -> None:
        self.kill_group(_signal.SIGKILL, timed_out=True)

    # -- followers ---------------------------------------------------------------------------

    def attach(self, after: int) -> int:
        with self.cond:
            fid = next(_follower_ids)
            self.followers[fid] = [after, True]
            return fid

    def detach(self, fid: int) -> None:
        with self.cond:
            self.followers.pop(fid, None)
            if self.readers_waiting:
                self.cond.notify_all()

    def snapshot_end(self) -> int:
        with self.cond:
            return self.exit_seq if self.exit_seq is not None else self.next_seq - 1

    def next_batch(
        self, fid: int, cursor: int, end: int | None
    ) -> tuple[list[bytes | tuple[int, bytes, bytes]], int, bool]:
        """Take the events after ``cursor`` (up to ``end``, or waiting for more when None).

        Returns (events, new cursor, done). Output events are returned raw, to be encoded outside
        the lock; the others are already encoded lines.
        """
        with self.cond:
            while True:
                batch, new_cursor = self._take(cursor, end)
                last = self.exit_seq if end is None else end
                done = last is not None and new_cursor >= last
                if batch or done or end is not None:
                    break
                self.cond.wait()
            follower = self.followers.get(fid)
            if follower is not None:
                follower[0] = new_cursor
            if self.readers_waiting:
                self.cond.notify_all()
            return batch, new_cursor, done

    def _take(self, cursor: int, end: int | None) -> tuple[list[Any], int]:
        batch: list[Any] = []
        limit = end if end is not None else sys.maxsize
        if cursor < 0 <= limit:
            batch.append(_json_line({"seq": 0, "type": "start", "pid": self.pid}))
            cursor = 0
        if cursor < self.first_seq - 1 and cursor < limit:
            last_dropped = self.first_seq - 1
            batch.append(
                _json_line(
                    {
                        "seq": last_dropped,
                        "type": "truncated",
                        "dropped_bytes": self._dropped_after(cursor),
                    }
                )
            )
            cursor = last_dropped
        size = 0
        start = cursor + 1 - self.first_seq
        for event in itertools.islice(self.events, start, None):
            if event[0] > limit or size >= BATCH_BYTES:
                break
            batch.append(event)
            size += len(event[2])
            cursor = event[0]
        if self.exit_seq is not None and cursor == self.exit_seq - 1 and self.exit_seq <= limit:
            batch.append(
                _json_line(
                    {
                        "seq": self.exit_seq,
                        "type": "exit",
                        "exit_code": self.exit_code,
                        "signal": self.signal,
                        "timed_out": self.timed_out,
                    }
                )
            )
            cursor = self.exit_seq
        return batch, cursor

    def _dropped_after(self, cursor: int) -> int:
        # Bytes of dropped chunks with seq > cursor; exact until the index was thinned, an
        # over-estimate after.
        import bisect

        i = bisect.bisect_right(self.drop_seqs, cursor) - 1
        return self.dropped_total - (self.drop_totals[i] if i >= 0 else 0)

    def describe(self) -> dict[str, Any]:
        with self.cond:
            return {
                "pid": self.pid,
                "cmd": self.cmd,
                "tag": self.tag,
                "running": self.exit_seq is None,
                "exit_code": self.exit_code,
                "signal": self.signal,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
            }


_follower_ids = itertools.count(1)


def encode_events(batch: list[Any]) -> bytes:
    parts = []
    for event in batch:
        if isinstance(event, bytes):
            parts.append(event)
        else:
            seq, kind, data = event
            parts.append(
                b'{"seq":%d,"type":"%b","data":"%b"}\n'
                % (seq, kind, binascii.b2a_base64(data, newline=False))
            )
    return b"".join(parts)


def parse_signal(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        name = value.strip().upper()
        if name.isdigit():
            return int(name)
        if not name.startswith("SIG"):
            name = "SIG" + name
        import signal  # its enum of names is only needed here

        sig = signal.Signals.__members__.get(name)
        if sig is not None:
            return int(sig)
    raise bad_request(f"unknown signal {value!r}")


def clean_env(env: dict[str, str]) -> dict[str, str]:
    result = {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX)}
    result.setdefault("PATH", DEFAULT_PATH)
    result.setdefault("HOME", "/root")
    return result


def _str_dict(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise bad_request(f"'{what}' must be an object of strings")
    return value


class Child:
    """A started child: its pid, the agent's ends of its pipes, and its return code.

    ``stdin`` is None when the child's stdin is /dev/null. ``popen`` is the ``subprocess.Popen``
    when one started the child: it is kept referenced and given the return code the reaper saw,
    so it never waits for the child itself.
    """

    def __init__(
        self,
        pid: int,
        stdin: IO[bytes] | None,
        stdout: IO[bytes],
        stderr: IO[bytes],
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.popen = popen
        self.returncode: int | None = None

    def set_returncode(self, code: int) -> None:
        self.returncode = code
        if self.popen is not None:
            self.popen.returncode = code


_devnull_fd = -1
_DEFAULT_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)  # ignored by Python, default in children


def _devnull() -> int:
    global _devnull_fd
    if _devnull_fd < 0:
        _devnull_fd = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    return _devnull_fd


def find_program(program: str, env: dict[str, str]) -> str:
    """The file ``program`` names, searched on the child's ``PATH`` like ``execvpe`` does."""
    if "/" in program:
        return program
    denied = False
    for directory in env.get("PATH", os.defpath).split(":"):
        candidate = posixpath.join(directory, program)
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode) and os.access(candidate, os.X_OK):
            return candidate
        denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def spawn_child(argv: list[str], env: dict[str, str], with_stdin: bool) -> Child | None:
    """Start ``argv`` in a new session with ``posix_spawn`` (vfork + exec), pipes on 0, 1, 2.

    The common case (the agent's cwd, the agent's user), without subprocess's imports and its
    Python-level work. Every fd of the agent is close-on-exec, so the child gets only its
    three. None when a pipe landed on fd 0-2 (the agent's own stdio was closed): then
    ``popen_child`` handles it.
    """
    path = find_program(argv[0], env)
    opened: list[int] = []
    try:
        if with_stdin:
            in_read, in_write = os.pipe()
            opened += (in_read, in_write)
        else:
            in_read, in_write = _devnull(), -1
        out_read, out_write = os.pipe()
        opened += (out_read, out_write)
        err_read, err_write = os.pipe()
        opened += (err_read, err_write)
        if min(in_read, out_write, err_write) <= 2:
            for fd in opened:
                os.close(fd)
            return None
        pid = os.posix_spawn(
            path,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, in_read, 0),
                (os.POSIX_SPAWN_DUP2, out_write, 1),
                (os.POSIX_SPAWN_DUP2, err_write, 2),
            ],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
        )
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    for fd in (in_read, out_write, err_write):
        if fd in opened:
            os.close(fd)
    return Child(
        pid,
        open(in_write, "wb", buffering=0) if with_stdin else None,
        open(out_read, "rb", buffering=0),
        open(err_read, "rb", buffering=0),
    )


def popen_child(
    argv: list[str], env: dict[str, str], with_stdin: bool, cwd: str, user_args: dict[str, Any]
) -> Child:
    """Start ``argv`` with ``subprocess.Popen`` (another cwd or user than the agent's).

    Raises OSError as Popen does, and ValueError for its other refusals.
    """
    import subprocess

    # Only the reaper waits: subprocess must never poll stale Popen objects (it would steal
    # exit statuses from the reaper).
    subprocess._active = None  # type: ignore[attr-defined]
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            cwd=cwd,
            env=env,
            start_new_session=True,
            **user_args,
        )
    except subprocess.SubprocessError as exc:
        raise ValueError(str(exc)) from None
    assert popen.stdout is not None and popen.stderr is not None
    return Child(popen.pid, popen.stdin, popen.stdout, popen.stderr, popen)


def _pwd() -> Any:
    import pwd

    return pwd


class Agent:
    """The process table, the default environment and the reaper.

    ``lock`` guards ``processes``, ``spawn_generation`` and ``default_env`` and is held across
    ``Popen`` (see the module docstring); ``reaper_wakeup`` is a condition on the same lock.
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.boot_id = os.urandom(16).hex()
        self.cwd = os.getcwd()  # children started here need no chdir (see spawn_child)
        self.lock = threading.Lock()
        self.reaper_wakeup = threading.Condition(self.lock)
        self.spawn_generation = 0
        self.processes: dict[int, Process] = {}
        self.default_env = clean_env(env)
        self.pumps = PumpPool()
        self.deadlines = Deadlines()

    def start(self) -> None:
        """Start the reaper (pipe readers and the deadline thread start when first needed)."""
        threading.Thread(target=self._reap_forever, name="reaper", daemon=True).start()

    def _reap_forever(self) -> None:
        while True:
            with self.lock:
                generation = self.spawn_generation
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                with self.lock:
                    if self.spawn_generation == generation:
                        self.reaper_wakeup.wait(ORPHAN_POLL)
                continue
            with self.lock:
                proc = self.processes.get(pid)
            if proc is not None and not proc.reaped:
                proc.on_reaped(status)

    def set_env(self, env: dict[str, str]) -> None:
        with self.lock:
            self.default_env = clean_env(env)

    def get(self, pid: int) -> Process:
        with self.lock:
            proc = self.processes.get(pid)
        if proc is None:
            raise ApiError(404, "not_found", f"no process with pid {pid}")
        return proc

    def all_processes(self) -> list[Process]:
        with self.lock:
            return sorted(self.processes.values(), key=lambda p: p.started_at)

    def forget(self, pid: int) -> None:
        with self.lock:
            proc = self.processes.get(pid)
            if proc is None:
                raise ApiError(404, "not_found", f"no process with pid {pid}")
            if proc.running:
                raise ApiError(409, "conflict", f"process {pid} is still running")
            del self.processes[pid]
        with proc.stdin_lock:
            if proc.child.stdin is not None:
                proc.child.stdin.close()

    def spawn(self, spec: dict[str, Any], follow: bool) -> tuple[Process, int | None]:
        """Start a process described by a ``POST /processes`` body; attach a follower if asked."""
        cmd, shell = spec.get("cmd"), spec.get("shell")
        if (cmd is None) == (shell is None):
            raise bad_request("exactly one of 'cmd' and 'shell' is required")
        if shell is not None:
            if not isinstance(shell, str):
                raise bad_request("'shell' must be a string")
            argv = ["/bin/sh", "-c", shell]
        else:
            if not (isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd)):
                raise bad_request("'cmd' must be a non-empty list of strings")
            argv = list(cmd)
        extra_env = _str_dict(spec.get("env"), "env")
        timeout = spec.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise bad_request("'timeout' must be a positive number of seconds or null")
        cwd_value = spec.get("cwd")
        cwd = resolve_path(cwd_value)[0] if cwd_value is not None else "/"
        program = argv[0]
        with self.lock:
            env = dict(self.default_env)
        user_args: dict[str, Any] = {}
        user = spec.get("user")
        if user is not None:
            user_args = self._user_args(user, program, env)
        env.update(extra_env)
        with_stdin = bool(spec.get("stdin"))
        with self.lock:
            try:
                child = None
                if user is None and cwd == self.cwd:
                    child = spawn_child(argv, env, with_stdin)
                if child is None:
                    child = popen_child(argv, env, with_stdin, cwd, user_args)
            except OSError as exc:
                if exc.filename == cwd and cwd != program:
                    doing = f"cannot start {program!r} in directory {cwd!r}"
                else:
                    doing = f"cannot execute {program!r}"
                raise ApiError(400, "exec_failed", f"{doing}: {exc.strerror or exc}") from None
            except ValueError as exc:
                raise ApiError(400, "exec_failed", f"cannot execute {program!r}: {exc}") from None
            proc = Process(child, argv, spec.get("tag"))
            self.processes[proc.pid] = proc  # replaces a finished, unforgotten pid twin
            fid = proc.attach(-1) if follow else None
            self.spawn_generation += 1
            self.reaper_wakeup.notify()
        pipes = [(child.stdout, b"stdout"), (child.stderr, b"stderr")]
        while pipes:
            pipe, kind = pipes[0]
            try:
                self.pumps.submit(proc, pipe, kind)
            except RuntimeError as exc:  # out of threads (pids limit): do not leave it unread
                proc.kill_group(_signal.SIGKILL)
                for unread, _ in pipes:
                    unread.close()
                    proc.pipe_closed()
                raise ApiError(
                    503, "internal", f"cannot follow the output of {program!r}: {exc}"
                ) from None
            pipes.pop(0)
        if timeout is not None:
            self.deadlines.add(float(timeout), proc)
        return proc, fid

    @staticmethod
    def _user_args(user: object, program: str, env: dict[str, str]) -> dict[str, Any]:
        try:
            if (isinstance(user, int) and not isinstance(user, bool)) or (
                isinstance(user, str) and user.isdigit()
            ):
                uid = int(user)
                try:
                    entry = _pwd().getpwuid(uid)
                except KeyError:
                    return {"user": uid, "group": uid, "extra_groups": []}
            elif isinstance(user, str):
                entry = _pwd().getpwnam(user)
            else:
                raise bad_request("'user' must be a user name or uid")
        except KeyError:
            raise ApiError(
                400, "exec_failed", f"cannot execute {program!r}: unknown user {user!r}"
            ) from None
        env["HOME"] = entry.pw_dir
        env["USER"] = env["LOGNAME"] = entry.pw_name
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": groups}


class PumpPool:
    """Threads that read child pipes into event logs, kept for reuse.

    ``idle`` (under ``lock``) counts workers that wait for a job or are about to; ``submit`` takes
    one of them or starts a new worker before queueing, so every queued job has a worker. Up to
    ``keep_idle`` workers stay after their pipe closes; the others end. None is started ahead:
    a thread starts in well under a millisecond, and an idle sandbox should hold few.
    """

    def __init__(self, keep_idle: int = 16) -> None:
        self.jobs: collections.deque[tuple[Process, Any, bytes]] = collections.deque()
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)  # a job was queued
        self.idle = 0
        self.keep_idle = keep_idle

    def submit(self, proc: Process, pipe: Any, kind: bytes) -> None:
        """Have ``pipe`` read; raises RuntimeError (nothing queued) when no thread can start."""
        with self.lock:
            reuse = self.idle > 0
            if reuse:
                self.idle -= 1
        if not reuse:
            self._add_worker()
        with self.lock:
            self.jobs.append((proc, pipe, kind))
            self.ready.notify()

    def _add_worker(self) -> None:
        threading.Thread(target=self._work, name="pipe-reader", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.jobs:
                    self.ready.wait()
                job = self.jobs.popleft()
            _pump(*job)
            with self.lock:
                if self.idle >= self.keep_idle:
                    return
                self.idle += 1


class Deadlines:
    """One thread that SIGKILLs the process group of each process whose timeout ran out.

    The heap (under ``cond``) holds weak references, so a forgotten process is not kept alive by a
    distant deadline; deadlines are on the monotonic clock.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, weakref.ref[Process]]] = []
        self.order = itertools.count()
        self.started = False  # the thread starts with the first deadline

    def add(self, seconds: float, proc: Process) -> None:
        import heapq
        import weakref

        with self.cond:
            if not self.started:
                threading.Thread(target=self._run, name="deadlines", daemon=True).start()
                self.started = True
            entry = (time.monotonic() + seconds, next(self.order), weakref.ref(proc))
            heapq.heappush(self.heap, entry)
            if self.heap[0] is entry:
                self.cond.notify()

    def _run(self) -> None:
        import heapq

        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.cond.wait(self.heap[0][0] - time.monotonic() if self.heap else None)
                proc = heapq.heappop(self.heap)[2]()
            if proc is not None:
                proc.on_timeout()  # a no-op once it has finished


def _pump(proc: Process, pipe: BinaryIO, kind: bytes) -> None:
    fd = pipe.fileno()
    try:
        while True:
            try:
                data = os.read(fd, PIPE_READ)
            except OSError:
                break
            if not data:
                break
            proc.append_output(kind, data)
    finally:
        pipe.close()
        proc.pipe_closed()


# ---------------------------------------------------------------------------------------------
# HTTP


class RequestBody:
    """A request body read incrementally, with Content-Length or chunked framing."""

    def __init__(self, rfile: Any, headers: Any) -> None:
        self.rfile = rfile
        encoding = headers.get("transfer-encoding")
        self.chunked = encoding is not None and "chunked" in encoding.lower()
        self.remaining = 0
        if not self.chunked:
            try:
                self.remaining = int(headers.get("content-length") or 0)
            except ValueError:
                raise bad_request("invalid Content-Length") from None
            if self.remaining < 0:
                raise bad_request("invalid Content-Length")
        self.done = not self.chunked and self.remaining == 0

    def read(self, size: int = FILE_CHUNK) -> bytes:
        """Up to ``size`` bytes; b"" at the end of the body."""
        if self.done:
            return b""
        if self.chunked and self.remaining == 0 and not self._next_chunk():
            return b""
        data = self.rfile.read(min(size, self.remaining))
        if not data:
            raise ConnectionError("request body ended early")
        self.remaining -= len(data)
        if self.remaining == 0:
            if self.chunked:
                self.rfile.readline(8)  # the CRLF after the chunk data
            else:
                self.done = True
        return data

    def _next_chunk(self) -> bool:
        line = self.rfile.readline(1024)
        if not line:
            raise ConnectionError("request body ended early")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ConnectionError("bad chunk size in request body") from None
        if size == 0:
            while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            self.done = True
            return False
        self.remaining = size
        return True

    def read_all(self, limit: int) -> bytes:
        parts, total = [], 0
        while chunk := self.read():
            total += len(chunk)
            if total > limit:
                raise bad_request(f"request body larger than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    def drain(self) -> None:
        while self.read():
            pass


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


_LAST_CHUNK = b"0\r\n\r\n"
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def _flag(query: dict[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise bad_request(f"query parameter {name!r} must be true or false, not {value!r}")


def _int(value: object, name: str, default: int | None = None) -> int:
    if value is None or value == "":
        if default is None:
            raise bad_request(f"{name!r} is required")
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise bad_request(f"{name!r} must be an integer, not {value!r}") from None


_PHRASES = {
    100: "Continue",
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
    507: "Insufficient Storage",
}
_METHODS = ("GET", "POST", "PUT", "DELETE")
MAX_LINE = 65536  # request line and header lines, as http.server allows
MAX_HEADERS = 100
_HEX = "0123456789abcdefABCDEF"


def unquote(text: str) -> str:
    """Percent-decoding as ``urllib.parse.unquote(errors="surrogateescape")`` does it: runs of
    ``%XX`` are decoded together as UTF-8, malformed escapes are kept as they are."""
    if "%" not in text:
        return text
    pieces = text.split("%")
    out = [pieces[0]]
    pending = bytearray()
    for piece in pieces[1:]:
        code = piece[:2]
        if len(code) == 2 and code[0] in _HEX and code[1] in _HEX:
            pending.append(int(code, 16))
            rest = piece[2:]
        else:
            rest = "%" + piece
        if rest:
            if pending:
                out.append(pending.decode("utf-8", "surrogateescape"))
                pending.clear()
            out.append(rest)
    if pending:
        out.append(pending.decode("utf-8", "surrogateescape"))
    return "".join(out)


def parse_query(query: str) -> dict[str, str]:
    """``dict(urllib.parse.parse_qsl(query, keep_blank_values=True, errors="surrogateescape"))``."""
    result = {}
    for field in query.split("&"):
        if not field:
            continue
        name, _, value = field.partition("=")
        result[unquote(name.replace("+", " "))] = unquote(value.replace("+", " "))
    return result


class _SocketWriter:
    """The response side of a connection: every write is one ``sendall``."""

    def __init__(self, sock: _socket.socket) -> None:
        self.write = sock.sendall


class _SocketReader(io.RawIOBase):
    """The request side of a connection, to be buffered (``socket.SocketIO`` without socket.py)."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.sock.recv_into(buffer)


class Handler:
    """One keep-alive HTTP/1.1 connection, served by its own thread.

    A small HTTP/1.1 server of its own rather than ``http.server``, whose imports (email, http
    client, ssl...) took ~90 ms of the agent's start inside gVisor. Every response is written
    with as few writes as possible.
    """

    def __init__(self, connection: _socket.socket, server: AgentServer) -> None:
        self.connection = connection
        self.server = server
        self.rfile = io.BufferedReader(_SocketReader(connection), 64 * 1024)
        self.wfile = _SocketWriter(connection)
        self.close_connection = True
        self.path = ""
        self.headers: dict[str, str] = {}

    def handle(self) -> None:
        try:
            self.connection.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            self.close_connection = False
            while not self.close_connection:
                self._handle_one()
        except OSError:
            pass
        finally:
            try:
                self.rfile.close()
                self.connection.shutdown(_socket.SHUT_WR)
            except OSError:
                pass
            self.connection.close()

    def _handle_one(self) -> None:
        line = self.rfile.readline(MAX_LINE + 1)
        if not line:
            self.close_connection = True
            return
        if len(line) > MAX_LINE:
            return self.send_error(414)
        words = line.decode("iso-8859-1").rstrip("\r\n").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            return self.send_error(400, f"Bad request syntax ({line[:200]!r})")
        method, self.path, version = words
        try:
            major, minor = (int(n) for n in version[5:].split(".", 1))
        except ValueError:
            return self.send_error(400, f"Bad request version ({version!r})")
        if major >= 2:
            return self.send_error(505, f"Invalid HTTP version ({version[5:]})")
        headers: dict[str, str] = {}
        while True:
            raw = self.rfile.readline(MAX_LINE + 1)
            if len(raw) > MAX_LINE:
                return self.send_error(431, "Line too long")
            if raw in (b"\r\n", b"\n", b""):
                break
            if len(headers) >= MAX_HEADERS:
                return self.send_error(431, "Too many headers")
            name, _, value = raw.decode("iso-8859-1").partition(":")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        self.headers = headers
        connection = headers.get("connection", "").lower()
        keep_alive = (major, minor) >= (1, 1) or connection == "keep-alive"
        self.close_connection = connection == "close" or not keep_alive
        if headers.get("expect", "").lower() == "100-continue" and (major, minor) >= (1, 1):
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if method not in _METHODS:
            return self.send_error(501, f"Unsupported method ({method!r})")
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")
        self._dispatch(method)

    # -- plumbing ----------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        self.body: RequestBody | None = None
        try:
            path, _, query = self.path.partition("#")[0].partition("?")
            self.query = parse_query(query)
            self.body = RequestBody(self.rfile, self.headers)
            self._route(method, path)
        except ApiError as exc:
            self._send_error(exc.status, exc.code, exc.message)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as exc:
            import traceback

            traceback.print_exc(file=sys.stderr)
            self._send_error(500, "internal", f"{type(exc).__name__}: {exc}")
        finally:
            if self.body is not None and not self.body.done and not self.close_connection:
                try:
                    self.body.drain()  # keep the connection usable after an early answer
                except (ConnectionError, OSError):
                    self.close_connection = True

    def _route(self, method: str, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        agent = self.server.agent
        if parts == ["health"] and method == "GET":
            return self._send_json(
                200,
                {"ok": True, "version": VERSION, "boot_id": agent.boot_id, "pid": os.getpid()},
            )
        if parts == ["config"] and method == "PUT":
            agent.set_env(_str_dict(self._json().get("env"), "env"))
            return self._send_empty()
        if parts and parts[0] == "processes":
            return self._route_processes(method, parts[1:])
        if parts and parts[0] == "files":
            return self._route_files(method, parts[1:])
        raise ApiError(404, "not_found", f"no route {method} {path}")

    def _route_processes(self, method: str, rest: list[str]) -> None:
        agent = self.server.agent
        if not rest:
            if method == "POST":
                return self._start_process()
            if method == "GET":
                procs = [p.describe() for p in agent.all_processes()]
                return self._send_json(200, {"processes": procs})
        else:
            pid = _int(rest[0], "pid")
            action = rest[1] if len(rest) == 2 else None
            if len(rest) == 1 and method == "GET":
                return self._send_json(200, agent.get(pid).describe())
            if len(rest) == 1 and method == "DELETE":
                agent.forget(pid)
                return self._send_empty()
            if action == "events" and method == "GET":
                proc = agent.get(pid)
                after = _int(self.query.get("after"), "after", -1)
                follow = _flag(self.query, "follow", False)
                end = None if follow else proc.snapshot_end()
                self.wfile.write(_STREAM_HEAD)  # answer at once even if no event is ready yet
                return self._stream_events(proc, proc.attach(after), after, end, head=b"")
            if action == "stdin" and method == "POST":
                return self._write_stdin(agent.get(pid))
            if action == "close-stdin" and method == "POST":
                proc = agent.get(pid)
                with proc.stdin_lock:
                    if proc.child.stdin is not None:
                        proc.child.stdin.close()
                return self._send_empty()
            if action == "signal" and method == "POST":
                proc = agent.get(pid)
                signum = parse_signal(self._json().get("signal"))
                try:
                    sent = proc.kill_group(signum)
                except OSError as exc:
                    raise os_error(exc, f"sending signal {signum} to process {pid}") from None
                if not sent:
                    raise ApiError(409, "conflict", f"process {pid} has already finished")
                return self._send_empty()
        raise ApiError(404, "not_found", f"no route {method} {self.path}")

    def _route_files(self, method: str, rest: list[str]) -> None:
        if not rest and method == "DELETE":
            path, raw = resolve_path(self.query.get("path"))
            remove_path(path, raw, _flag(self.query, "recursive", False))
            return self._send_empty()
        what = rest[0] if len(rest) == 1 else None
        if what == "content" and method == "GET":
            return self._send_file(*resolve_path(self.query.get("path")))
        if what == "content" and method == "PUT":
            return self._receive_file(*resolve_path(self.query.get("path")))
        if what == "stat" and method == "GET":
            return self._send_json(200, file_stat(*resolve_path(self.query.get("path"))))
        if what == "list" and method == "GET":
            path, raw = resolve_path(self.query.get("path"))
            depth = _int(self.query.get("depth"), "depth", 1)
            if depth < 1:
                raise bad_request("'depth' must be at least 1")
            return self._send_json(200, {"entries": list_dir(path, raw, depth)})
        if what == "mkdir" and method == "POST":
            body = self._json()
            path, raw = resolve_path(body.get("path"))
            created = make_dir(path, raw, bool(body.get("parents", True)))
            return self._send_json(200, {"created": created})
        if what == "move" and method == "POST":
            body = self._json()
            src, src_raw = resolve_path(body.get("src"))
            dst, dst_raw = resolve_path(body.get("dst"))
            return self._send_json(200, move_path(src, src_raw, dst, dst_raw))
        raise ApiError(404, "not_found", f"no route {method} {self.path}")

    def _json(self) -> dict[str, Any]:
        assert self.body is not None
        raw = self.body.read_all(MAX_JSON_BODY)
        if not raw:
            return {}
        try:
            value = json_loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"request body is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise bad_request("request body must be a JSON object")
        return value

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_PHRASES.get(status, 'Unknown')}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_json(self, status: int, value: Any) -> None:
        body = json_dumps(value)
        head = self._head(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        self.wfile.write(head + body)

    def _send_empty(self) -> None:
        self.wfile.write(self._head(204, []))

    def _send_error(self, status: int, code: str, message: str) -> None:
        self._send_json(status, {"error": message, "code": code})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed requests and unknown methods, before _dispatch: answer JSON like the rest.
        self.close_connection = True
        text = message or _PHRASES.get(code, "Unknown")
        self._send_error(code, "bad_request" if code < 500 else "internal", text)

    # -- processes ---------------------------------------------------------------------------

    def _start_process(self) -> None:
        stream = _flag(self.query, "stream", False)
        proc, fid = self.server.agent.spawn(self._json(), follow=stream)
        if fid is None:
            return self._send_json(201, {"pid": proc.pid})
        self._stream_events(proc, fid, -1, None, head=_STREAM_HEAD)

    def _stream_events(
        self, proc: Process, fid: int, after: int, end: int | None, head: bytes
    ) -> None:
        """Write the events after ``after`` as chunked NDJSON, ``head`` (if any) first."""
        cursor = after
        try:
            while True:
                batch, cursor, done = proc.next_batch(fid, cursor, end)
                data = encode_events(batch)
                out = _chunk(data) if data else b""
                if done:
                    out += _LAST_CHUNK
                if out or head:
                    self.wfile.write(head + out)
                    head = b""
                if done:
                    return
        except OSError:
            self.close_connection = True  # the client went away mid-stream
        finally:
            proc.detach(fid)

    def _write_stdin(self, proc: Process) -> None:
        assert self.body is not None
        with proc.stdin_lock:
            pipe = proc.child.stdin
            if pipe is None:
                raise ApiError(409, "conflict", f"process {proc.pid} was started without stdin")
            if pipe.closed:
                raise ApiError(409, "conflict", f"stdin of process {proc.pid} is closed")
            fd = pipe.fileno()
            while data := self.body.read():
                view = memoryview(data)
                while view:
                    try:
                        written = os.write(fd, view)
                    except BrokenPipeError:
                        raise ApiError(
                            409, "conflict", f"process {proc.pid} no longer reads its stdin"
                        ) from None
                    view = view[written:]
        self._send_empty()

    # -- files -------------------------------------------------------------------------------

    def _send_file(self, path: str, raw: bytes) -> None:
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
            head = self._head(
                200,
                [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))],
            )
            if small or not size:
                self.wfile.write(head + small)
                return
            self.wfile.write(head)
            sent = 0
            try:
                while sent < size:
                    count = os.sendfile(self.connection.fileno(), f.fileno(), sent, size - sent)
                    if not count:
                        break
                    sent += count
            except OSError:
                self.close_connection = True
                return
            if sent != size:  # the file shrank under us: the framing is broken, drop the line
                self.close_connection = True

    def _receive_file(self, path: str, raw: bytes) -> None:
        assert self.body is not None
        mode_value = self.query.get("mode")
        mode = _int(mode_value, "mode") if mode_value not in (None, "") else None
        parents = _flag(self.query, "parents", False)
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
                while data := self.body.read(FILE_CHUNK):
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
        self._send_json(200, {"path": path, "size": size})


class AgentServer:
    """The listening socket and its accept loop: one daemon thread per connection."""

    request_queue_size = 128

    def __init__(self, address: tuple[str, int], agent: Agent) -> None:
        self.agent = agent
        self.socket = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        self.socket.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        self.socket.bind(address)
        self.socket.listen(self.request_queue_size)

    def serve_forever(self) -> None:
        while True:
            try:
                fd, _ = self.socket._accept()  # type: ignore[attr-defined]
                connection = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
            except OSError:  # out of fds, or the peer left before accept: keep serving
                time.sleep(0.01)
                continue
            handler = Handler(connection, self)
            try:
                threading.Thread(target=handler.handle, name="connection", daemon=True).start()
            except RuntimeError:  # out of threads (pids limit): drop this connection
                connection.close()


def _ignore_signal(signum: int, frame: object) -> None:
    pass


def guard_init_signals() -> None:
    """As PID 1, survive stray signals from inside the sandbox (``kill -INT 1``...).

    Python's own SIGINT handler would raise KeyboardInterrupt in the accept loop and end the
    sandbox. Handlers rather than SIG_IGN: caught signals return to their defaults in children on
    exec, ignored ones would be inherited. Stopping a sandbox is the runtime's SIGKILL.
    """
    if os.getpid() != 1:
        return
    for signum in (
        _signal.SIGINT,
        _signal.SIGTERM,
        _signal.SIGHUP,
        _signal.SIGUSR1,
        _signal.SIGUSR2,
    ):
        _signal.signal(signum, _ignore_signal)


def become_subreaper() -> None:
    """When not PID 1 (tests, debugging), still adopt orphans so they are reaped here."""
    if os.getpid() == 1:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # best effort: without it orphans go to the real init
        pass


def main() -> int:
    port = int(os.environ.get(ENV_PREFIX + "PORT") or DEFAULT_PORT)
    host = os.environ.get(ENV_PREFIX + "HOST") or DEFAULT_HOST
    threading.stack_size(512 * 1024)
    guard_init_signals()
    become_subreaper()
    agent = Agent(dict(os.environ))
    agent.start()
    server = AgentServer((host, port), agent)
    print(f"corral agent {VERSION} listening on {host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
