"""Starting a child: ``posix_spawn`` in the common case, ``subprocess.Popen`` otherwise.

A child always starts in a new session (its pid is its process group, which is what signals and
timeouts are sent to), with pipes on its stdout and stderr and either a pipe or /dev/null on its
stdin; it gets only those three fds, since every fd of the agent is close-on-exec. Nothing here
waits for a child: only the reaper (``processes.Agent``) calls ``waitpid``, and hands the status
to ``Child.set_returncode``.
"""

from __future__ import annotations

import _signal
import errno
import os
import posixpath
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import IO, Any


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
        stderr: IO[bytes] | None,
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


def set_window_size(fd: int, rows: int, cols: int) -> None:
    """Set a terminal's size (``TIOCSWINSZ``); the kernel sends SIGWINCH to its foreground group."""
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def pty_child(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    user_args: dict[str, Any],
    rows: int,
    cols: int,
) -> Child:
    """Start ``argv`` on a new pseudo-terminal of ``rows`` x ``cols``, as its controlling tty.

    The child gets the slave on fds 0-2 in a new session (``setsid`` then ``TIOCSCTTY``, which
    posix_spawn cannot do, hence Popen's fork). The agent keeps the master: ``stdin`` writes to
    it (through the line discipline, so ``\\x03`` interrupts the foreground group) and ``stdout``
    reads from it; ``stderr`` is None (it is the same terminal).
    """
    import fcntl
    import subprocess
    import termios

    ioctl, set_ctty = fcntl.ioctl, termios.TIOCSCTTY

    def controlling_tty() -> None:
        # In the child, after setsid (start_new_session), where fd 0 is the slave. It imports
        # nothing: an import in a child forked from a threaded process could deadlock.
        ioctl(0, set_ctty, 0)

    subprocess._active = None  # type: ignore[attr-defined]  # only the reaper waits
    master, slave = os.openpty()  # both close-on-exec
    try:
        set_window_size(master, rows, cols)
        popen = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            bufsize=0,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=controlling_tty,
            **user_args,
        )
    except subprocess.SubprocessError as exc:
        os.close(master)
        raise ValueError(str(exc)) from None
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return Child(
        popen.pid,
        open(os.dup(master), "wb", buffering=0),
        open(master, "rb", buffering=0),
        None,
        popen,
    )
