"""Host-side measures the benches share: a process's memory, the host's CPU over a window, a
whole process's wall and CPU time, a sandbox's CPU from its cgroup, and the verdict lines
against issue 14's goals.
"""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# kcmp(2) on x86-64 and its KCMP_VM type: do two processes share one address space (mm)?
_SYS_KCMP, _KCMP_VM = 312, 1

# The roles of a runsc sandbox's host processes, in the order the benches print them.
ROLES = ("sentry", "gofer", "app: largest space", "app: other spaces", "other")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _same_address_space(a: int, b: int) -> bool:
    return bool(_libc().syscall(_SYS_KCMP, a, b, _KCMP_VM, 0, 0) == 0)


def address_spaces(pids: list[int]) -> list[list[int]]:
    """``pids`` grouped by address space. systrap runs each application address space in stub
    processes of its own, several per space when the application has several threads (clone
    with CLONE_VM, without CLONE_THREAD: separate pids), and /proc/PID/smaps of each reports
    the whole shared space: summed per process, one space counts once per stub."""
    groups: list[list[int]] = []
    for pid in pids:
        for group in groups:
            if _same_address_space(group[0], pid):
                group.append(pid)
                break
        else:
            groups.append([pid])
    return groups


def _rollup_kib(pid: int) -> tuple[int, int]:
    pss = uss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key == "Pss":
            pss += int(rest.split()[0])
        elif key in ("Private_Clean", "Private_Dirty"):
            uss += int(rest.split()[0])
    return pss, uss


def _role(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if b"boot" in argv:
        return "sentry"
    if b"gofer" in argv:
        return "gofer"
    return "app" if Path(f"/proc/{pid}/comm").read_text().strip() == "exe" else "other"


def memory_by_role(pids: list[int]) -> dict[str, tuple[int, int]]:
    """(PSS, USS) in KiB of a sandbox's host processes by role (``ROLES``), each address space
    counted once: runsc's sentry (``boot``), its gofer, the stub address space with the most PSS
    (the init's: corral's agent or raw runsc's ``sleep``), the other stub spaces, and anything
    else. PSS shares runsc's common pages among every runsc process on the host (it moves with
    what else runs); USS counts only pages private to one space. Neither counts the pages of the
    sentry's memory file that no process maps, kernel memory, or page cache nobody maps."""
    figures = dict.fromkeys(ROLES, (0, 0))
    apps: list[tuple[int, int]] = []
    for group in address_spaces(pids):
        try:
            role, kib = _role(group[0]), _rollup_kib(group[0])
        except OSError:
            continue
        if role == "app":
            apps.append(kib)
        else:
            figures[role] = (figures[role][0] + kib[0], figures[role][1] + kib[1])
    apps.sort(reverse=True)
    if apps:
        figures["app: largest space"] = apps[0]
        rest = apps[1:]
        figures["app: other spaces"] = (sum(k[0] for k in rest), sum(k[1] for k in rest))
    return figures


def memory_kib_of(pids: list[int]) -> tuple[int, int]:
    """(PSS, USS) in KiB summed over ``pids``, each address space once (``memory_by_role``)."""
    figures = memory_by_role(pids).values()
    return sum(f[0] for f in figures), sum(f[1] for f in figures)


def memory_table(
    corral: list[dict[str, tuple[int, int]]], raw: list[dict[str, tuple[int, int]]]
) -> tuple[list[str], float, float]:
    """The lines of a per-role table (``memory_by_role`` of each sandbox, means in MiB) of
    corral beside raw runsc, and corral's (PSS, USS) beyond raw in total."""

    def mean(of: list[dict[str, tuple[int, int]]], role: str, i: int) -> float:
        return sum(f[role][i] for f in of) / max(1, len(of)) / 1024

    head = f"{'host processes, MiB (mean)':26}"
    lines = [
        head
        + "".join(
            f"{h:>11}"
            for h in ("corral PSS", "raw PSS", "beyond", "corral USS", "raw USS", "beyond")
        )
    ]
    totals = [0.0] * 4
    for role in (*ROLES, "total"):
        if role == "total":
            row = totals
        else:
            row = [
                mean(corral, role, 0),
                mean(raw, role, 0),
                mean(corral, role, 1),
                mean(raw, role, 1),
            ]
            totals = [t + r for t, r in zip(totals, row, strict=True)]
        cells = (row[0], row[1], row[0] - row[1], row[2], row[3], row[2] - row[3])
        lines.append(f"{role:26}" + "".join(f"{c:11.2f}" for c in cells))
    return lines, totals[0] - totals[1], totals[2] - totals[3]


def process_children() -> dict[int, list[int]]:
    """Every process's children, from /proc (one snapshot)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def pids_matching(token: str, children: dict[int, list[int]] | None = None) -> list[int]:
    """The processes whose command line names ``token`` and all their descendants: runsc's
    systrap stub processes (``[exe]``) map the sandbox's application memory but do not name it."""
    out = subprocess.run(["pgrep", "-f", token], capture_output=True, text=True).stdout
    roots = {int(p) for p in out.split()} - {os.getpid()}
    children = process_children() if children is None else children
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return sorted(found)


def process_trees(tokens: list[str]) -> dict[str, list[int]]:
    """For each token, the processes whose command line names it and all their descendants
    (one scan of /proc for all tokens; this bench's own process is left out)."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    cmdlines.pop(os.getpid(), None)
    trees = {}
    for token in tokens:
        needle = token.encode()
        todo = [pid for pid, cmdline in cmdlines.items() if needle in cmdline]
        found: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, []))
        trees[token] = sorted(found)
    return trees


def process_cpu_s(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds so far of each of ``pids`` still alive."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat's first line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def host_cpu_busy(window_s: float) -> float:
    """Busy share of the whole host (all cores: 1.0 = every core busy) over ``window_s``."""
    busy0, total0 = cpu_jiffies()
    time.sleep(window_s)
    busy1, total1 = cpu_jiffies()
    return (busy1 - busy0) / max(1, total1 - total0)


def settle_host(max_busy: float = 0.25, window_s: float = 2.0, limit_s: float = 120.0) -> float:
    """Wait until the whole host is at most ``max_busy`` busy over a ``window_s`` window (what a
    bench run before this one, or another user, left running dies down), for at most
    ``limit_s``; returns the last window's busy share, for the bench to print beside the
    baseline it measures next (a baseline taken on a busy host makes every ratio to it wrong)."""
    deadline = time.monotonic() + limit_s
    while True:
        busy = host_cpu_busy(window_s)
        if busy <= max_busy or time.monotonic() >= deadline:
            return busy


def mem_available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


@dataclass
class ProcessRun:
    wall_ms: float
    cpu_ms: float
    exit_code: int


def whole_process(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ProcessRun:
    """Run ``argv`` to its end (output read and thrown away); its wall time from spawn to reap
    and its user+sys CPU time as the kernel accounted it (``wait4``). Peak RSS is not given:
    the kernel keeps the forking parent's across the exec."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - started) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen quiet
    return ProcessRun(
        wall_ms=wall,
        cpu_ms=(usage.ru_utime + usage.ru_stime) * 1000,
        exit_code=proc.returncode,
    )


def goal_line(what: str, measured: float, limit: float, unit: str, how: str) -> str:
    """One verdict: ``what`` measured against ``limit`` (``how`` says where it comes from)."""
    verdict = "met" if measured <= limit else "missed"
    unit = unit if unit == "x" else " " + unit
    return f"goal {what}: {measured:.1f}{unit} vs at most {limit:.1f}{unit} ({how}): {verdict}"


def ratio_goal_line(what: str, measured: float, baseline: float, factor: float, base: str) -> str:
    """A goal of at most ``factor`` times ``baseline`` (``base`` names the baseline)."""
    ratio = measured / baseline
    verdict = "met" if ratio <= factor else "missed"
    return (
        f"goal {what}: {ratio:.2f}x {base} ({measured:.1f} vs {baseline:.1f} ms)"
        f" vs at most {factor:.1f}x: {verdict}"
    )


CGROUP_ROOT = Path("/sys/fs/cgroup")


def sandbox_cpu_meter(sandbox_id: str) -> Callable[[], float] | None:
    """A reader of the CPU time (ms) the sandbox's cgroup has charged: everything its gVisor
    runs (sentry, gofer, the application's stubs), whatever the host's load; None when no
    cgroup of the sandbox is found. Its runsc container id holds the sandbox's id; cgroup v1's
    ``cpuacct.usage`` or v2's ``cpu.stat`` ``usage_usec``."""
    unified = (CGROUP_ROOT / "cgroup.controllers").exists()
    top = CGROUP_ROOT if unified else CGROUP_ROOT / "cpuacct"
    found: list[Path] = []
    for parent, dirs, _files in os.walk(top):
        depth = len(Path(parent).relative_to(top).parts)
        found += [Path(parent) / d for d in dirs if sandbox_id in d]
        if depth >= 2:
            dirs.clear()
    if not found:
        return None
    here = min(found, key=lambda path: len(path.parts))
    if unified:
        stat = here / "cpu.stat"

        def read_v2() -> float:
            for line in stat.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) / 1000
            return 0.0

        return read_v2
    usage = here / "cpuacct.usage"
    return lambda: int(usage.read_text()) / 1e6
