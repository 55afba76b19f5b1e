"""Density at steady state: N idle sandboxes as a user has them, frozen after their idle time,
and exec into any of them (thaw included) beside the same on one sandbox alone.

    .venv/bin/python bench/density_steady.py [--count 300] [--freeze-after 5] [--sample 40]

``density.py`` thaws every sandbox before its exec passes and its idle window, so at 300 it
measures 300 running idle gVisor sandboxes on 2 cores (each costs about 2 % of a core, so the
host is saturated and every exec waits for it). Issue 14's goal is about idle sandboxes, which
corral freezes after ``--freeze-after`` seconds without a call. This bench measures that:

1. one sandbox alone, once the host has settled (a bench run just before leaves it busy for a
   while; it waits up to 2 minutes for the host to be at most 25 % busy and prints how busy it
   was): exec of ``true`` into it running (the unloaded round trip, 20 runs) and into it frozen
   (each run waits until the daemon froze it again: thaw included);
2. the other N-1 made ``CONCURRENCY`` at a time (creates refused up front vs failed);
3. an exec into EVERY sandbox (each must work), then a wait until the daemon froze all of them;
4. host memory per sandbox (PSS/USS of its host processes) beside 2 raw runsc containers
   (``sleep``) measured at the same moment, and host CPU over an idle window with all N frozen;
5. exec into a random sample of the N, one at a time, each frozen when called (thaw included),
   as a ratio to both unloaded figures of step 1.

Everything it made is removed at the end, also on Ctrl-C, SIGTERM or failure.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, RawRunsc, timed
from _measure import goal_line, mem_available_mib, memory_kib_of, process_trees, settle_host
from density import (
    CONCURRENCY,
    Fleet,
    count_goal_line,
    density_daemon,
    idle_window,
    ms_of,
)

from corral import Client, Sandbox


def wait_frozen(sbx: Sandbox, limit_s: float) -> bool:
    """Poll the daemon (``info`` does not thaw) until ``sbx`` is frozen, at most ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if sbx.info().frozen:
            return True
        time.sleep(0.2)
    return False


def wait_all_frozen(fleet: Fleet, limit_s: float) -> tuple[int, float]:
    """Wait until every live sandbox is frozen, at most ``limit_s``: (frozen, seconds waited)."""
    started = time.monotonic()
    pending = list(fleet.live.values())
    while pending and time.monotonic() - started < limit_s:
        pending = [sbx for sbx in pending if not sbx.info().frozen]
        if pending:
            time.sleep(1)
    return len(fleet.live) - len(pending), time.monotonic() - started


def exec_frozen(sbx: Sandbox, limit_s: float) -> float | None:
    """The round trip of ``true`` into ``sbx`` once it is frozen (None: it never froze)."""
    if not wait_frozen(sbx, limit_s):
        return None
    result, took = ms_of(lambda: sbx.exec(["true"], timeout=60))
    if result.exit_code != 0:
        raise RuntimeError(f"{sbx.id}: exec of true exited {result.exit_code}")
    return took


def raw_memory(fleet: Fleet) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(PSS, USS) KiB of every sandbox's host processes and of 2 raw runsc ``sleep``
    containers, read at the same moment."""
    raw = RawRunsc()
    raw_ids: list[str] = []
    try:
        raw_ids = [raw.start_idle() for _ in range(2)]
        time.sleep(1)  # the raw containers settle (nothing to wait on: they only sleep)
        tokens = [raw.process_token(cid) for cid in raw_ids]
        trees = process_trees([*fleet.live, *tokens])
        ours = [memory_kib_of(trees[sid]) for sid in fleet.live]
        theirs = [memory_kib_of(trees[token]) for token in tokens]
    finally:
        for cid in raw_ids:
            raw.delete(cid)
        raw.close()
    return ours, theirs


def mean_mib(values: list[tuple[int, int]], i: int) -> float:
    return sum(v[i] for v in values) / max(1, len(values)) / 1024


def steady(client: Client, fleet: Fleet, args: argparse.Namespace, cpu: float, pid: int) -> None:
    n, freeze_limit = args.count, args.freeze_after + 60

    def make() -> Sandbox:
        return client.create_sandbox(memory_mib=args.memory_mib, disk_mib=args.disk_mib, cpu=cpu)

    print(
        f"steady density: {n} idle sandboxes of {args.memory_mib} MiB, {cpu:.2f} vCPU each,"
        f" frozen after {args.freeze_after:g} s without a call"
    )
    available_before = mem_available_mib()
    first = fleet.spawn(1, make)[0]
    busy = settle_host()
    print(f"host {busy * 100:.0f} % busy before the unloaded baseline (waits for at most 25 %)")
    hot = Figures("exec, 1 sandbox alone, running", timed(lambda: first.exec(["true"]), 20))
    alone = [exec_frozen(first, freeze_limit) for _ in range(args.alone_runs)]
    cold = Figures("exec, 1 sandbox alone, frozen", [t for t in alone if t is not None])

    started = time.monotonic()
    fleet.spawn(n - 1, make, tolerate=True)
    create_s, held = time.monotonic() - started, len(fleet.live)
    print(
        f"created {held - 1} more in {create_s:.0f} s ({CONCURRENCY} at a time); "
        f"{len(fleet.refused)} refused up front (capacity), {len(fleet.failed)} failed otherwise"
    )
    for reason in [*sorted(set(fleet.refused))[:3], *fleet.failed[:5]]:
        print(f"  {reason}")

    failures = []
    for sbx in list(fleet.live.values()):
        try:
            if sbx.exec(["true"], timeout=60).exit_code != 0:
                failures.append(f"{sbx.id}: exit not 0")
        except Exception as exc:
            failures.append(f"{sbx.id}: {exc}")
    print(f"exec into every sandbox: {held - len(failures)} of {held} worked")
    for failure in failures[:10]:
        print(f"  failed: {failure}")

    frozen, waited = wait_all_frozen(fleet, freeze_limit + held * 0.1)
    print(f"frozen: {frozen} of {held}, {waited:.0f} s after the pass over all of them")
    ours, theirs = raw_memory(fleet)
    available_at_n = mem_available_mib()
    host_busy, sandboxes_cores, daemon_cores = idle_window(fleet, pid, args.idle_window)

    sample = random.sample(list(fleet.live.values()), min(args.sample, held))
    loaded_ms = []
    for sbx in sample:
        took = exec_frozen(sbx, freeze_limit)
        if took is not None:
            loaded_ms.append(took)
    loaded = Figures(f"exec at {held}, a frozen one (sample)", loaded_ms)

    print()
    print(f"{'exec round trip of true':44} {'p50 ms':>9} {'p99 ms':>9} {'/ running':>10}")
    for fig in (hot, cold, loaded):
        if fig.samples_ms:
            ratio = fig.p50 / hot.p50
            print(f"{fig.name:44} {fig.p50:9.2f} {fig.p99:9.2f} {ratio:9.2f}x")
    print(f"  ({len(loaded_ms)} of {len(sample)} sampled sandboxes froze and answered)")
    print()
    cores = os.cpu_count() or 1
    print(f"host CPU over a {args.idle_window:g} s window, all {held} frozen ({cores} cores):")
    print(f"  whole host (/proc/stat): {host_busy * 100:.1f} % of all cores")
    print(f"  the sandboxes' host processes: {sandboxes_cores * 100:.2f} % of one core")
    print(f"  the daemon, with the commands it ran: {daemon_cores * 100:.2f} % of one core")
    print()
    corral_pss, corral_uss = mean_mib(ours, 0), mean_mib(ours, 1)
    raw_pss, raw_uss = mean_mib(theirs, 0), mean_mib(theirs, 1)
    print(f"{'idle sandbox, host processes (mean)':44} {'PSS MiB':>9} {'USS MiB':>9}")
    print(f"{'raw runsc container (sleep), 2':44} {raw_pss:9.1f} {raw_uss:9.1f}")
    print(f"{f'corral sandbox (frozen), all {held}':44} {corral_pss:9.1f} {corral_uss:9.1f}")
    print(f"{'corral beyond runsc own':44} {corral_pss - raw_pss:9.1f} {corral_uss - raw_uss:9.1f}")
    given = (available_before - available_at_n - 2 * raw_pss) / held
    print(f"host MemAvailable drop per sandbox: {given:.1f} MiB (all of it, the daemon's included)")
    print()
    print(count_goal_line("idle running sandboxes", held, 300, not failures))
    if loaded.samples_ms:
        ratio = loaded.p50 / hot.p50
        print(goal_line(f"exec at {held}, frozen, vs alone", ratio, 3, "x", "issue 14"))
    print(goal_line("memory beyond runsc own (PSS)", corral_pss - raw_pss, 10, "MiB", "issue 14"))
    verdict = "met" if not fleet.failed else f"missed ({len(fleet.failed)} failed)"
    print(f"goal creates under load (none fails, issue 14): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="idle sandboxes")
    parser.add_argument("--memory-mib", type=int, default=64)
    parser.add_argument("--disk-mib", type=int, default=32)
    parser.add_argument("--freeze-after", type=float, default=5.0, help="seconds without a call")
    parser.add_argument("--sample", type=int, default=40, help="frozen sandboxes exec'd, timed")
    parser.add_argument("--alone-runs", type=int, default=5, help="frozen execs, 1 sandbox")
    parser.add_argument("--idle-window", type=float, default=10.0, help="seconds")
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    args.parked = 0  # check_capacity's parked part: none here
    with density_daemon(args) as (daemon, client, cpu):
        fleet = Fleet(client)
        try:
            steady(client, fleet, args, cpu, daemon.process.pid)
        finally:
            fleet.kill_all()


if __name__ == "__main__":
    main()
