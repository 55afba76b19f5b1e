"""The sandbox's own out-of-memory killer: what a VM's kernel does, done inside gVisor.

gVisor (this runsc version) has no OOM killer of its own: when the sandbox's memory is used up,
the host cgroup's killer acts, and since the sentry holds the sandbox's memory (its memory file
is charged to no single process) it often kills the sentry, ending the whole sandbox. So the agent
watches the sandbox's free memory as gVisor accounts it (``sysinfo(2)``: one ``fstat`` of the
memory file in the sentry, microseconds) and, when less than ``reserve`` is left, SIGKILLs the
process with the largest resident set (never itself), like Linux's OOM killer. The runtime gives
the host cgroup some headroom above the sandbox's memory so this happens first.

The poll interval shrinks as memory fills: the time to fill what is left at ``FILL_RATE``, halved,
between ``MIN_INTERVAL`` and ``MAX_INTERVAL``. After a kill it waits up to ``COOLDOWN`` for the
memory to come back before choosing another victim (gVisor frees a dead process's pages
asynchronously). Runs only as PID 1, i.e. inside a sandbox: on a host it would kill host processes.
"""

from __future__ import annotations

import _signal
import os
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MIB = 1024 * 1024
RESERVE_MIN = 8 * MIB  # kill when less than max(RESERVE_MIN, RESERVE_FRACTION of total) is free
RESERVE_FRACTION = 0.02
FILL_RATE = 1024 * MIB  # bytes/s a process allocates at most inside gVisor (~830 MB/s measured)
MIN_INTERVAL = 0.005
MAX_INTERVAL = 0.5
COOLDOWN = 2.0


def memory() -> tuple[int, int]:
    """(total, free) bytes of the sandbox's memory, as gVisor accounts them."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page


def largest_process(exclude: set[int]) -> tuple[int, int, str] | None:
    """(pid, resident bytes, name) of the process with the largest resident set."""
    page = os.sysconf("SC_PAGE_SIZE")
    best: tuple[int, int, str] | None = None
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/statm", "rb") as fh:
                resident = int(fh.read().split()[1]) * page
            if best is None or resident > best[1]:
                with open(f"/proc/{entry}/comm", "rb") as fh:
                    name = fh.read().strip().decode(errors="replace")
                best = (int(entry), resident, name)
        except (OSError, ValueError, IndexError):
            continue  # it exited meanwhile
    return best


def ancestry(pid: int) -> list[int]:
    """``pid``, its parent, and so on up to (not including) PID 1."""
    chain: list[int] = []
    current = pid
    while current > 1 and current not in chain and len(chain) < 64:
        chain.append(current)
        try:
            with open(f"/proc/{current}/stat", "rb") as fh:
                current = int(fh.read().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


class OomKiller:
    """The watcher thread. ``on_kill(ancestry, resident, name, total)`` is told of every kill
    (``ancestry``: the victim's pid, then its parent's, up to the agent's children).
    ``read_memory`` and ``find_victim`` are ``memory`` and ``largest_process`` (tests swap them)."""

    def __init__(
        self,
        on_kill: Callable[[list[int], int, str, int], None],
        read_memory: Callable[[], tuple[int, int]] = memory,
        find_victim: Callable[[set[int]], tuple[int, int, str] | None] = largest_process,
    ) -> None:
        self.on_kill = on_kill
        self.read_memory = read_memory
        self.find_victim = find_victim
        self.kills = 0
        self.cooldown_until = 0.0

    def start(self) -> None:
        if os.getpid() != 1:
            return  # not in a sandbox: this is someone's host
        threading.Thread(target=self._watch, name="oom-killer", daemon=True).start()

    def _watch(self) -> None:
        while True:
            try:
                interval = self.check()
            except (OSError, ValueError):
                return
            time.sleep(interval)

    def check(self) -> float:
        """Look once; kill if memory is short. Returns how long to wait before the next look."""
        total, free = self.read_memory()
        reserve = max(RESERVE_MIN, int(total * RESERVE_FRACTION))
        now = time.monotonic()
        if free >= reserve:
            self.cooldown_until = 0.0
        elif now >= self.cooldown_until:
            victim = self.find_victim({os.getpid()})
            if victim is not None:
                pid, resident, name = victim
                chain = ancestry(pid)
                try:
                    os.kill(pid, _signal.SIGKILL)
                except OSError:
                    pass
                else:
                    self.kills += 1
                    self.on_kill(chain or [pid], resident, name, total)
                self.cooldown_until = now + COOLDOWN
        headroom = max(0, free - reserve)
        return min(MAX_INTERVAL, max(MIN_INTERVAL, headroom / FILL_RATE / 2))
