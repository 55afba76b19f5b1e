"""Density: many idle sandboxes of 64 MiB, and many parked ones, on one private daemon.

    .venv/bin/python bench/density.py [--count 50] [--parked 0] [--memory-mib 64]

``--count N`` running sandboxes (all idle: only their agent runs):
- host CPU over an idle window: the whole host's from /proc/stat, before the sandboxes and with
  all N of them (other load on a shared host counts there), and the sandboxes' own host processes
  and the daemon's, from /proc/PID/stat (it does not);
- host memory per sandbox: PSS and USS of every sandbox's host processes beside raw runsc
  containers (`sleep`, same base image and platform) measured at the same moment;
- exec round trip of `true` into EVERY sandbox at N (each must work) vs unloaded (the first
  sandbox, timed before the others existed);
- idle freezing: host CPU of the same N sandboxes while running idle, then once the daemon has
  frozen them all (``--freeze-after`` seconds without a call), beside N raw runsc sandboxes
  (`sleep`) over a window of the same length, and the exec round trip into a frozen sandbox
  (thaw included).
``--parked M`` sandboxes, each created and parked at once (so only a few run at a time): park
time, disk used per parked sandbox (blocks of the daemon's data dir, before vs after), and the
wake time and a working exec for a sample of them. With ``--parked-made K`` only K are created
and parked that way and the rest are imported parked (``corral import``) from the export of one
of them: a parked sandbox is a record and its images, whatever made it, and a create + park
costs seconds of CPU on a loaded 2-core host (2,000 would take about two hours at load 15);
the sample woken is drawn from both kinds.

Goals (issue 14): 300 idle running sandboxes of 64 MiB on 2 cores and 24 GiB with exec under 3x
its unloaded round trip; 2,000 parked; under 10 MiB per idle sandbox beyond runsc's own.

It checks the host and the daemon's capacity before creating anything and stops with a clear
message if they cannot hold N (or M). Everything it made is removed at the end, also on Ctrl-C,
SIGTERM or failure. The daemon's CPU overcommit is raised to 64 so that capacity is bounded by
memory, not vCPUs; each sandbox gets min(1, vCPUs / N) vCPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Daemon, Figures, RawRunsc, private_daemon, signals_held, timed
from _measure import (
    cpu_jiffies,
    goal_line,
    host_cpu_busy,
    mem_available_mib,
    memory_by_role,
    memory_kib_of,
    memory_table,
    process_cpu_s,
    process_trees,
)

from corral import Client, Sandbox
from corral.sdk import CapacityError as Refused

CONCURRENCY = 4  # creates (and kills) in flight at once, as the daemon forks
MEMORY_SAMPLE = 10  # sandboxes whose host processes are measured
WAKE_SAMPLE = 10  # parked sandboxes woken
EST_IMAGE_MIB = 16  # a parked idle sandbox's memory image, a generous estimate for the check
# What an idle 64 MiB sandbox takes of the host's memory, generously (19-25 MiB PSS measured):
# the host check; the daemon itself refuses a create up front when the host is short.
EST_RUNNING_MIB = 40
RAW_CPU_SAMPLE = 50  # raw runsc sandboxes whose idle CPU is the baseline of the frozen ones

T = TypeVar("T")


class CapacityError(Exception):
    """The host or the daemon cannot hold what was asked."""


def ms_of(fn: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - started) * 1000


def blocks_mib(root: Path) -> float:
    """MiB of disk blocks allocated under ``root`` on its own filesystem (sparse files count
    only what they hold; mounted sandbox disks are not crossed into, their image files count)."""
    device = root.stat().st_dev
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.lstat(os.path.join(dirpath, d)).st_dev == device]
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total / (1024 * 1024)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the bench like Ctrl-C, so that its cleanup runs."""

    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Fleet:
    """The sandboxes this bench made, created and killed ``CONCURRENCY`` at a time. ``kill_all``
    runs with Ctrl-C and SIGTERM held off, so an impatient second Ctrl-C cannot leave sandboxes
    behind; it also kills any the daemon lists that a cut-short create left without a handle."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.live: dict[str, Sandbox] = {}
        self.refused: list[str] = []  # creates the daemon refused up front (capacity)
        self.failed: list[str] = []  # creates that failed any other way

    def spawn(
        self, count: int, make: Callable[[], Sandbox], *, tolerate: bool = False
    ) -> list[Sandbox]:
        """Make ``count`` sandboxes, ``CONCURRENCY`` at a time. With ``tolerate`` a create that
        fails is counted (``refused`` or ``failed``) and the others go on; without, it raises."""
        pool = ThreadPoolExecutor(CONCURRENCY)
        futures: list[Future[Sandbox]] = [pool.submit(make) for _ in range(count)]
        made: list[Sandbox] = []
        try:
            for future in futures:
                try:
                    sbx = future.result()
                except Refused as exc:
                    if not tolerate:
                        raise
                    self.refused.append(str(exc))
                    continue
                except Exception as exc:
                    if not tolerate:
                        raise
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                    continue
                self.live[sbx.id] = sbx
                made.append(sbx)
        finally:
            with signals_held():  # let the creates in flight end, to know every sandbox made
                pool.shutdown(wait=True, cancel_futures=True)
            for future in futures:  # those finished after a failure: still ours to kill
                if future.done() and not future.cancelled() and future.exception() is None:
                    self.live.setdefault(future.result().id, future.result())
        return made

    def kill_all(self) -> None:
        with signals_held():
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                list(pool.map(self._kill, list(self.live.values())))
            # Any the daemon has that we never got a handle for (a create cut short).
            try:
                left = [i for i in self.client.list_sandboxes() if i.state != "killed"]
            except Exception as exc:
                print(f"warning: listing the daemon's sandboxes: {exc}", file=sys.stderr)
                left = []
            for info in left:
                self._kill(self.client.sandbox(info.id))

    def _kill(self, sbx: Sandbox) -> None:
        try:
            sbx.kill()
        except Exception as exc:
            print(f"warning: killing sandbox {sbx.id}: {exc}", file=sys.stderr)
        self.live.pop(sbx.id, None)


def count_goal_line(what: str, held: int, goal: int, all_worked: bool) -> str:
    """A goal of holding at least ``goal``: met only when this run held that many and all
    worked; a smaller run says so instead of guessing."""
    if held >= goal:
        verdict = "met" if all_worked else "missed (some did not answer)"
    elif all_worked:
        verdict = f"not tested at this size (run with {goal} to test it)"
    else:
        verdict = "missed (some did not answer already at this size)"
    return f"goal {what}: held {held}, issue 14 asks at least {goal}: {verdict}"


def check_capacity(client: Client, args: argparse.Namespace, data_dir: Path) -> float:
    """Raise CapacityError unless the host and the daemon can hold the run; the vCPUs each
    running sandbox gets."""
    problems = []
    capacity = client.capacity()
    running_mib = args.count * args.memory_mib
    available = mem_available_mib()
    host_mib = args.count * min(args.memory_mib, EST_RUNNING_MIB)
    if host_mib > available - 1024:
        problems.append(
            f"{args.count} idle sandboxes take about {host_mib} MiB of the host, which has"
            f" {available} MiB available (less 1 GiB kept free)"
        )
    if running_mib > capacity.memory.free:
        problems.append(
            f"{args.count} x {args.memory_mib} MiB = {running_mib} MiB is over the daemon's free"
            f" memory ({capacity.memory.free:.0f} MiB of {capacity.memory.total:.0f})"
        )
    running_disk = max(args.count, CONCURRENCY) * args.disk_mib
    # A parked sandbox reserves only its image; CONCURRENCY run at once while being made.
    parked_disk = CONCURRENCY * args.disk_mib + args.parked * EST_IMAGE_MIB
    disk_needed = max(running_disk, parked_disk)
    if disk_needed > capacity.disk.free:
        problems.append(
            f"the disks need {disk_needed} MiB reserved, the daemon has {capacity.disk.free:.0f}"
            f" MiB of disk free"
        )
    host_free = shutil.disk_usage(data_dir).free // (1024 * 1024)
    if args.parked * EST_IMAGE_MIB > host_free - 4096:
        problems.append(
            f"{args.parked} parked sandboxes may write {args.parked * EST_IMAGE_MIB} MiB, the host"
            f" has {host_free} MiB free at {data_dir} (less 4 GiB kept free)"
        )
    if problems:
        raise CapacityError("this host cannot hold the run: " + "; ".join(problems))
    return min(1.0, capacity.cpu.free / max(1, args.count))


def reaped_cpu_s(pid: int) -> float:
    """CPU seconds of the children ``pid`` has waited for (the runsc commands the daemon ran)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def idle_window(fleet: Fleet, daemon_pid: int, seconds: float) -> tuple[float, float, float]:
    """Over ``seconds`` of idling: (the host's busy share from /proc/stat, the cores the
    sandboxes' host processes used, the cores the daemon used with the commands it ran and
    waited for), the last two from /proc/PID/stat so that other load on a shared host does not
    count."""
    trees = process_trees(list(fleet.live))
    pids = [pid for tree in trees.values() for pid in tree]
    before = process_cpu_s([*pids, daemon_pid])
    reaped_before = reaped_cpu_s(daemon_pid)
    busy0, total0 = cpu_jiffies()
    started = time.perf_counter()
    time.sleep(seconds)
    after = process_cpu_s([*pids, daemon_pid])
    reaped = reaped_cpu_s(daemon_pid) - reaped_before
    busy1, total1 = cpu_jiffies()
    elapsed = time.perf_counter() - started
    used = {pid: after[pid] - before[pid] for pid in after if pid in before}
    daemon_cores = (used.pop(daemon_pid, 0.0) + reaped) / elapsed
    return (busy1 - busy0) / max(1, total1 - total0), sum(used.values()) / elapsed, daemon_cores


def idle_cores(tokens: list[str], seconds: float) -> float:
    """Cores used over ``seconds`` by the host processes of ``tokens`` (their trees, united)."""
    pids = sorted({pid for tree in process_trees(tokens).values() for pid in tree})
    before = process_cpu_s(pids)
    started = time.perf_counter()
    time.sleep(seconds)
    after = process_cpu_s(pids)
    elapsed = time.perf_counter() - started
    return sum(after[pid] - before[pid] for pid in after if pid in before) / elapsed


def frozen_count(fleet: Fleet) -> int:
    return sum(1 for sbx in list(fleet.live.values()) if sbx.info().frozen)


def freezing(fleet: Fleet, args: argparse.Namespace, daemon_pid: int, running_cores: float) -> None:
    """Wait until the daemon froze every sandbox; their host CPU then, beside N raw runsc."""
    n = len(fleet.live)
    started = time.perf_counter()
    deadline = started + args.freeze_after + 120
    while (frozen := frozen_count(fleet)) < n and time.perf_counter() < deadline:
        time.sleep(1)
    waited = time.perf_counter() - started
    _, frozen_cores, daemon_cores = idle_window(fleet, daemon_pid, args.idle_window)
    thaws = []
    for sbx in list(fleet.live.values())[: min(n, 20)]:
        thaws.append(ms_of(lambda: sbx.exec(["true"], timeout=30))[1])  # noqa: B023
    raw = RawRunsc()
    raw_ids: list[str] = []
    raw_n = min(n, RAW_CPU_SAMPLE)  # N more gVisor sandboxes would crowd a shared host
    try:
        raw_ids = [raw.start_idle() for _ in range(raw_n)]
        time.sleep(3)  # as the corral ones: settled before the window
        tokens = [raw.process_token(cid) for cid in raw_ids]
        raw_cores = idle_cores(tokens, args.idle_window) * n / raw_n  # scaled to N
    finally:
        for cid in raw_ids:
            raw.delete(cid)
        raw.close()
    thaw = Figures(f"exec into a frozen sandbox (thaw), {len(thaws)}", thaws)
    print()
    print(
        f"idle freezing (after {args.freeze_after:.0f} s without a call): {frozen} of {n} frozen"
        f" {waited:.0f} s after the last call"
    )
    header = "host CPU over an idle window, % of one core"
    print(f"{header:52} {'all N':>8} {'each':>7} {'ratio':>7}")
    raw_name = f"{n} raw runsc sandboxes (sleep)"
    if raw_n < n:
        raw_name = f"raw runsc (sleep), {raw_n} measured, x {n / raw_n:g}"
    rows = [
        (raw_name, raw_cores),
        (f"{n} corral sandboxes, running idle", running_cores),
        (f"{n} corral sandboxes, frozen", frozen_cores),
    ]
    for name, cores in rows:
        ratio = cores / raw_cores if raw_cores > 0 else float("nan")
        print(f"  {name:50} {cores * 100:8.2f} {cores * 100 / n:7.3f} {ratio:6.2f}x")
    print(
        f"  the daemon while they are frozen (with the commands it ran): {daemon_cores * 100:.2f}"
        " % of one core"
    )
    print(f"{thaw.name:44} p50 {thaw.p50:7.2f} ms  p99 {thaw.p99:7.2f} ms")


def running_density(
    client: Client, fleet: Fleet, args: argparse.Namespace, cpu: float, daemon_pid: int
) -> None:
    n = args.count

    creates: list[float] = []

    def make() -> Sandbox:
        sbx, took = ms_of(
            lambda: client.create_sandbox(
                memory_mib=args.memory_mib, disk_mib=args.disk_mib, cpu=cpu
            )
        )
        creates.append(took)
        return sbx

    cores = os.cpu_count() or 1
    print(f"running: {n} idle sandboxes of {args.memory_mib} MiB, {cpu:.2f} vCPU each")
    host_before = host_cpu_busy(args.idle_window)
    daemon_before, available_before = memory_kib_of([daemon_pid]), mem_available_mib()
    first = fleet.spawn(1, make)[0]
    unloaded = Figures("exec round trip, 1 sandbox", timed(lambda: first.exec(["true"]), 20))
    _, create_ms = ms_of(lambda: fleet.spawn(n - 1, make, tolerate=True))
    held = n = len(fleet.live)  # from here on: the sandboxes made (some may have been refused)
    time.sleep(3)  # let the last ones settle (agents finish starting)
    for sbx in list(fleet.live.values()):  # a call to each: none is frozen in the window below
        with contextlib.suppress(Exception):
            sbx.exec(["true"], timeout=30)
    host_at_n, sandboxes_cores, daemon_cores = idle_window(fleet, daemon_pid, args.idle_window)
    frozen_early = frozen_count(fleet)

    raw = RawRunsc()
    raw_ids: list[str] = []
    try:
        raw_ids = [raw.start_idle() for _ in range(2)]
        time.sleep(1)
        raw_tokens = [raw.process_token(cid) for cid in raw_ids]
        trees = process_trees([*fleet.live, *raw_tokens])
        ours = [memory_by_role(trees[sid]) for sid in fleet.live]
        theirs = [memory_by_role(trees[token]) for token in raw_tokens]
        daemon_at_n, available_at_n = memory_kib_of([daemon_pid]), mem_available_mib()
    finally:
        for cid in raw_ids:
            raw.delete(cid)
        raw.close()

    # Two passes over every sandbox: the first must work (its first exec also opens the SDK's
    # connection to it, as the unloaded one was before its clock), the second is timed.
    samples, failures = [], []
    for timed_pass in (False, True):
        for sbx in list(fleet.live.values()):
            try:
                result, took = ms_of(lambda: sbx.exec(["true"], timeout=30))  # noqa: B023
                if result.exit_code != 0:
                    failures.append(f"{sbx.id}: exit {result.exit_code}")
                elif timed_pass:
                    samples.append(took)
            except Exception as exc:
                failures.append(f"{sbx.id}: {exc}")
    loaded = Figures(f"exec round trip, into each of {n}", samples)

    def mean_mib(values: list[dict[str, tuple[int, int]]], i: int) -> float:
        return sum(f[i] for v in values for f in v.values()) / max(1, len(values)) / 1024

    corral_pss, raw_pss = mean_mib(ours, 0), mean_mib(theirs, 0)
    per_sandbox_core = sandboxes_cores * 100 / n
    print(
        f"created {held - 1} more in {create_ms / 1000:.1f} s ({CONCURRENCY} at a time);"
        f" {len(fleet.refused)} refused up front (capacity), {len(fleet.failed)} failed otherwise"
    )
    for reason in sorted(set(fleet.refused))[:3]:
        print(f"  refused: {reason}")
    for reason in fleet.failed[:5]:
        print(f"  failed: {reason}")
    early = Figures(f"create, the first {min(50, len(creates))}", creates[:50])
    late = Figures(f"create, the last {min(50, len(creates))}", creates[-50:])
    print(f"{'measure':44} {'p50 ms':>9} {'p99 ms':>9} {'ratio p50':>10}")
    print(f"{unloaded.name:44} {unloaded.p50:9.2f} {unloaded.p99:9.2f} {'(baseline)':>10}")
    ratio = loaded.p50 / unloaded.p50 if loaded.samples_ms else float("nan")
    if loaded.samples_ms:
        print(f"{loaded.name:44} {loaded.p50:9.2f} {loaded.p99:9.2f} {ratio:9.2f}x")
    if creates:
        print(f"{early.name:44} {early.p50:9.2f} {early.p99:9.2f}")
        print(f"{late.name:44} {late.p50:9.2f} {late.p99:9.2f} {late.p50 / early.p50:9.2f}x")
    print(f"exec into each sandbox, twice: {2 * n - len(failures)} of {2 * n} worked")
    for failure in failures[:10]:
        print(f"  failed: {failure}")
    print()
    print(f"host CPU over a {args.idle_window:.0f} s idle window ({cores} cores)")
    print(
        f"  whole host (/proc/stat), before the sandboxes: {host_before * 100:5.1f} % of all cores"
    )
    print(
        f"  whole host (/proc/stat), with {n} idle sandboxes: {host_at_n * 100:5.1f} % of all cores"
    )
    print(f"  the {n} sandboxes' host processes: {sandboxes_cores * 100:.1f} % of one core")
    print(f"  per idle sandbox: {per_sandbox_core:.2f} % of one core")
    print(f"  the daemon, with the commands it ran: {daemon_cores * 100:.1f} % of one core")
    if frozen_early:
        print(f"  (warning: {frozen_early} froze during this window; raise --freeze-after)")
    print()
    print(
        f"idle sandboxes (agent), all {n}, beside 2 idle raw runsc containers (sleep),"
        " each address space once"
    )
    print("\n".join(memory_table(ours, theirs)[0]))
    daemon_pss, daemon_uss = ((daemon_at_n[i] - daemon_before[i]) / 1024 / n for i in (0, 1))
    print(f"{'the daemon, growth per sandbox':44} {daemon_pss:9.2f} {daemon_uss:9.2f}")
    # Everything the host gave (page cache of the disks, kernel memory, the memory file's pages
    # no process maps), less what the 2 raw containers took; other load on the host counts too.
    given = (available_before - available_at_n - 2 * raw_pss) / n
    print(f"host MemAvailable drop per sandbox: {given:.1f} MiB (all of it, the daemon's included)")
    print()
    print(count_goal_line("idle running sandboxes", held, 300, not failures))
    verdict = "met" if not fleet.failed else f"missed ({len(fleet.failed)} failed)"
    print(
        f"goal creates under load: {held - 1} succeeded, {len(fleet.refused)} refused up front,"
        f" {len(fleet.failed)} failed otherwise (issue 14: none fails): {verdict}"
    )
    print(
        f"  at 300 (measured per sandbox x 300): about {per_sandbox_core * 300:.0f} % of one core"
        f" while idle ({cores * 100} % available), {corral_pss * 300 / 1024:.1f} GiB PSS"
    )
    if loaded.samples_ms:
        print(goal_line(f"exec at {n} vs unloaded", ratio, 3, "x", "issue 14"))
    print(goal_line("memory beyond runsc own (PSS)", corral_pss - raw_pss, 10, "MiB", "issue 14"))
    if failures:
        print(f"goal exec into any of them working: {len(failures)} of {2 * n} failed: missed")
    freezing(fleet, args, daemon_pid, sandboxes_cores)


def parked_density(client: Client, fleet: Fleet, args: argparse.Namespace, data_dir: Path) -> None:
    m = args.parked
    k = min(m, args.parked_made) if args.parked_made else m
    parks: list[float] = []
    imports: list[float] = []

    def make_parked() -> Sandbox:
        sbx = client.create_sandbox(memory_mib=args.memory_mib, disk_mib=args.disk_mib)
        time.sleep(0.5)  # let the agent settle, as an idle sandbox would be
        parks.append(ms_of(sbx.park)[1])
        return sbx

    print(f"parked: {m} sandboxes of {args.memory_mib} MiB, each created and parked at once")
    if k < m:
        print(f"  ({k} made so, {m - k} imported parked from the export of one of them)")
    disk_before = blocks_mib(data_dir)
    made, took = ms_of(lambda: fleet.spawn(k, make_parked))
    imported: list[Sandbox] = []
    if k < m:
        export = data_dir.parent / "parked-export.tar"
        export_mib = client.export_sandbox(made[0].id, export) / (1024 * 1024)

        def make_imported() -> Sandbox:
            result, took_ms = ms_of(lambda: client.import_file(export))
            imports.append(took_ms)
            assert result.sandbox is not None, result
            return client.sandbox(result.sandbox.id)

        imported, import_took = ms_of(lambda: fleet.spawn(m - k, make_imported))
        export.unlink()
    disk_after = blocks_mib(data_dir)
    held = len(client.list_sandboxes(state="parked"))
    images = [sbx.info().image_mib for sbx in made[: min(k, 50)]]
    woken = random.sample(made, min(WAKE_SAMPLE // 2 if imported else WAKE_SAMPLE, k))
    woken += random.sample(imported, min(WAKE_SAMPLE - len(woken), len(imported)))
    wakes, failures = [], 0
    for sbx in woken:
        wakes.append(ms_of(sbx.wake)[1])
        if sbx.exec(["true"], timeout=30).exit_code != 0:
            failures += 1
    park_fig, wake_fig = Figures("park (idle)", parks), Figures(f"wake (with {m} parked)", wakes)
    print(f"created and parked {k} in {took / 1000:.1f} s ({CONCURRENCY} at a time)")
    if imported:
        print(
            f"imported {len(imported)} parked in {import_took / 1000:.1f} s ({CONCURRENCY} at a"
            f" time) from one export of {export_mib:.1f} MiB"
        )
    print(f"parked sandboxes the daemon listed before the wakes: {held}")
    print(f"{'measure':44} {'p50 ms':>9} {'p99 ms':>9}")
    figures = [park_fig, wake_fig]
    if imports:
        figures.insert(1, Figures("import of a parked sandbox", imports))
    for fig in figures:
        print(f"{fig.name:44} {fig.p50:9.2f} {fig.p99:9.2f}")
    print(f"exec after wake: {len(woken) - failures} of {len(woken)} worked")
    m = held
    per_parked = (disk_after - disk_before) / max(1, m)
    print(f"disk used per parked sandbox (data dir blocks): {per_parked:.1f} MiB")
    mean_image = sum(images) / max(1, len(images))
    print(f"memory image per parked sandbox (the daemon's image_mib, mean): {mean_image:.1f} MiB")
    print()
    print(count_goal_line("parked sandboxes", m, 2000, failures == 0))
    print(f"  2,000 parked would take about {per_parked * 2000 / 1024:.1f} GiB of disk")


@contextmanager
def density_daemon(args: argparse.Namespace) -> Iterator[tuple[Daemon, Client, float]]:
    """A private daemon (CPU overcommitted, freezing after ``args.freeze_after`` s) and a client
    of it, after checking that the host and the daemon have room for what ``args`` asks: yields
    the vCPU each sandbox gets; exits 2 with the shortfall if there is no room. SIGTERM acts as
    Ctrl-C throughout, so everything made is removed."""
    settings = {
        "CORRAL_CPU_OVERCOMMIT": "64",
        "CORRAL_FREEZE_IDLE_SECONDS": str(args.freeze_after),
    }
    with (
        sigterm_as_interrupt(),
        private_daemon(settings) as daemon,
        Client(daemon.url, daemon.key) as client,
    ):
        try:
            cpu = check_capacity(client, args, daemon.data_dir / "data")
        except CapacityError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        yield daemon, client, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50, help="idle running sandboxes")
    parser.add_argument("--parked", type=int, default=0, help="parked sandboxes (0: none)")
    parser.add_argument(
        "--parked-made",
        type=int,
        default=0,
        help="of those, how many to create and park; the rest are imported (0: all made)",
    )
    parser.add_argument("--memory-mib", type=int, default=64)
    parser.add_argument("--disk-mib", type=int, default=32)
    parser.add_argument("--idle-window", type=float, default=10.0, help="seconds")
    parser.add_argument(
        "--freeze-after", type=float, default=45.0, help="the daemon's freeze idle seconds"
    )
    args = parser.parse_args()
    if args.count < 0 or args.parked < 0 or args.count + args.parked == 0:
        parser.error("give --count N and/or --parked M (at least one above 0)")
    with density_daemon(args) as (daemon, client, cpu):
        data_dir = daemon.data_dir / "data"
        fleet = Fleet(client)
        try:
            if args.count:
                running_density(client, fleet, args, cpu, daemon.process.pid)
                fleet.kill_all()
            if args.parked:
                if args.count:
                    print()
                parked_density(client, fleet, args, data_dir)
        finally:
            fleet.kill_all()


if __name__ == "__main__":
    main()
