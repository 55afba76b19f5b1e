"""Host-side measures the benches share: a process's memory, the host's CPU over a window, a
whole process's wall and CPU time, and the verdict lines against issue 14's goals.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def memory_kib_of(pids: list[int]) -> tuple[int, int]:
    """(PSS, USS) summed over ``pids``. PSS shares runsc's common pages among every runsc
    process on the host (it moves with what else runs); USS counts only pages private to one
    process (the application memory that a sandbox's stub processes share is not in it)."""
    pss = uss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                key, _, rest = line.partition(":")
                if key == "Pss":
                    pss += int(rest.split()[0])
                elif key in ("Private_Clean", "Private_Dirty"):
                    uss += int(rest.split()[0])
        except OSError:
            continue
    return pss, uss


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
