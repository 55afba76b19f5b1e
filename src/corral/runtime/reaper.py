"""Child-subreaper handling for the daemon process.

``runsc run -detach`` leaves the sandbox and gofer processes behind as orphans. When the daemon is
a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``) they are re-parented to the daemon instead of
pid 1, and ``runsc delete -force`` finishes in ~0.1 s instead of ~2 s, *provided the daemon reaps
them*: runsc polls ``kill(pid, 0)`` until the sandbox pid is gone, and a zombie never is.

So a subreaper must reap its adopted orphans, but must not steal the exit status of children that
asyncio (or ``subprocess``) started and is waiting for. runsc re-executes itself through
``/proc/self/exe``, so every process it leaves behind (sandbox, gofer, systrap stubs) is named
``exe``; ``reap_adopted_zombies`` collects only zombie children with that name. Invariant for the
rest of the daemon: never start a program whose name is ``exe`` directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["become_subreaper", "reap_adopted_zombies", "reaping"]

_PR_SET_CHILD_SUBREAPER = 36
_ADOPTED_COMM = "exe"


def become_subreaper() -> None:
    """Make this process the reaper of its descendants' orphans (Linux only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def _child_pids() -> set[int]:
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (task / "children").read_text().split())
    return pids


def _is_adopted_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ..." — comm may contain spaces or parentheses, so split at the last ')'.
    head, _, rest = stat.rpartition(")")
    comm = head.partition("(")[2]
    return comm == _ADOPTED_COMM and rest.split()[:1] == ["Z"]


def reap_adopted_zombies() -> int:
    """Reap zombie children left by runsc; return how many were reaped. Never blocks."""
    reaped = 0
    for pid in _child_pids():
        if _is_adopted_zombie(pid):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
    return reaped


@contextlib.asynccontextmanager
async def reaping(interval: float = 0.01) -> AsyncIterator[None]:
    """Reap adopted zombies every ``interval`` seconds while the body runs (e.g. a runsc delete
    that waits for the sandbox process to disappear), and once more at the end."""

    async def loop() -> None:
        while True:
            reap_adopted_zombies()
            await asyncio.sleep(interval)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        reap_adopted_zombies()
