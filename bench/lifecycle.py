"""Park, wake, fork into 1 and into 10, snapshot and restore, beside raw runsc in the same run.

Two workloads, each as a corral sandbox (through the SDK, so an HTTP round trip and the agent's
readiness check are included) and as a raw runsc container on the same base image and platform
(``--network=none --overlay2=root:memory``):

    idle    corral: a sandbox with nothing but its agent (a Python process)
            raw:    a container running an idle Python process
    200MB   both also hold a Python process that allocated and touched 200 MB

The raw baselines: park = ``runsc checkpoint``; wake = ``runsc restore`` of that image into a new
id; fork into N = ``checkpoint --leave-running`` + N restores (4 at a time, as the daemon does);
snapshot = ``checkpoint --leave-running``; restore = ``runsc restore`` of it. Goals (issue 14):
park, wake, snapshot and restore at most 1.3x raw; fork into 10 at most 1.5x raw (one checkpoint
and 10 restores, as many at once as the cores allow) and under 2 s in total for an idle sandbox.
Each round times raw runsc, then corral, so that load from elsewhere weighs on both alike.

Run: ``.venv/bin/python bench/lifecycle.py [--runs N]`` (root, real runsc). With ``--breakdown``,
the time of each step of corral's path beside raw runsc instead (``lifecycle_breakdown.py``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figures, RawRunsc, private_daemon
from _measure import goal_line, ratio_goal_line

from corral import Client
from corral.runtime.reaper import become_subreaper, reap_adopted_zombies

HOLD_200MB = (
    "import time\n"
    "b = bytearray(200 * 1024 * 1024)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "open('/tmp/ready', 'w').write('1')\n"
    "time.sleep(1e6)\n"
)
IDLE = "import time; time.sleep(1e6)"
FORK_CONCURRENCY = 4
WORKLOADS = {"idle": None, "200MB": HOLD_200MB}


T = TypeVar("T")


def timed_call(fn: Callable[..., T], *args: object) -> tuple[T, float]:
    """``fn(*args)`` and how long it took, in ms."""
    started = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - started) * 1000


MEASURES = ("park", "wake", "fork 1", "fork 10", "snapshot", "restore")


# -- corral --------------------------------------------------------------------------------------


class CorralSide:
    """One corral sandbox of the workload, driven through the SDK."""

    def __init__(self, client: Client, label: str, hold: str | None) -> None:
        self.client, self.label = client, label
        self.sbx = client.create_sandbox(memory_mib=512 if hold else 256)
        if hold:
            self.sbx.exec_background(["python3", "-c", hold])
            while self.sbx.exec(["test", "-e", "/tmp/ready"]).exit_code != 0:
                time.sleep(0.1)

    def park_wake(self) -> tuple[float, float]:
        return timed_call(self.sbx.park)[1], timed_call(self.sbx.wake)[1]

    def fork(self, count: int) -> float:
        children, took = timed_call(self.sbx.fork, count)
        assert len(children) == count
        for child in children:
            child.kill()
        return took

    def snapshot_restore(self, i: int) -> tuple[float, float]:
        name = f"bench-{self.label}-{i}"
        _, took = timed_call(self.sbx.snapshot, name)
        restored, back = timed_call(lambda: self.client.create_sandbox(snapshot=name))
        restored.kill()
        self.client.remove_snapshot(name)
        return took, back

    def close(self) -> None:
        self.sbx.kill()


# -- raw runsc -----------------------------------------------------------------------------------


def reap_forever() -> None:
    """As the daemon does: adopt runsc's sandbox processes and reap them, so that
    ``delete -force`` returns in ~0.1 s, not ~1.5 s (untimed, but it keeps the run short)."""
    become_subreaper()

    def loop() -> None:
        while True:
            reap_adopted_zombies()
            time.sleep(0.01)

    threading.Thread(target=loop, name="reaper", daemon=True).start()


class RawSide:
    """One raw runsc container of the workload: a Python process, idle or holding 200 MB."""

    def __init__(self, raw: RawRunsc, hold: str | None) -> None:
        self.raw = raw
        self.work = Path(tempfile.mkdtemp(prefix="corral-bench-images-"))
        self.cid = raw.start_detached(["python3", "-c", hold or IDLE])
        self.images = 0
        time.sleep(2.0 if hold else 0.5)  # let it allocate and touch its memory

    def _image(self) -> Path:
        self.images += 1
        return self.work / f"image-{self.images}"

    def park_wake(self) -> tuple[float, float]:
        image = self._image()
        park = self.raw.checkpoint(self.cid, image)
        self.raw.delete(self.cid)
        self.cid, wake = self.raw.restore(image, self.cid)
        shutil.rmtree(image)
        return park, wake

    def fork(self, count: int) -> float:
        image = self._image()
        started = time.perf_counter()
        self.raw.checkpoint(self.cid, image, leave_running=True)
        with ThreadPoolExecutor(FORK_CONCURRENCY) as pool:
            made = list(pool.map(self.raw.restore, [image] * count, [self.cid] * count))
        took = (time.perf_counter() - started) * 1000
        with ThreadPoolExecutor(FORK_CONCURRENCY) as pool:
            list(pool.map(self.raw.delete, [child for child, _ in made]))
        shutil.rmtree(image)
        return took

    def snapshot_restore(self, _i: int) -> tuple[float, float]:
        image = self._image()
        took = self.raw.checkpoint(self.cid, image, leave_running=True)
        child, back = self.raw.restore(image, self.cid)
        self.raw.delete(child)
        shutil.rmtree(image)
        return took, back

    def close(self) -> None:
        self.raw.delete(self.cid)
        shutil.rmtree(self.work, ignore_errors=True)


def measure_workload(
    client: Client, raw: RawRunsc, label: str, hold: str | None, runs: int
) -> tuple[dict[str, Figures], dict[str, Figures]]:
    """(corral's figures, raw runsc's) for one workload. Each round times raw, then corral, so
    load from elsewhere on the host weighs on both alike; the first round warms up."""
    samples: dict[str, dict[str, list[float]]] = {
        side: {k: [] for k in MEASURES} for side in ("corral", "raw")
    }
    sides: dict[str, CorralSide | RawSide] = {}
    try:
        sides["raw"] = RawSide(raw, hold)
        sides["corral"] = CorralSide(client, label, hold)
        for i in range(runs + 1):
            for name, side in sides.items():
                park, wake = side.park_wake()
                if i:
                    samples[name]["park"].append(park)
                    samples[name]["wake"].append(wake)
        for count in (1, 10):
            for i in range(runs + 1):
                for name, side in sides.items():
                    took = side.fork(count)
                    if i:
                        samples[name][f"fork {count}"].append(took)
        for i in range(runs + 1):
            for name, side in sides.items():
                took, back = side.snapshot_restore(i)
                if i:
                    samples[name]["snapshot"].append(took)
                    samples[name]["restore"].append(back)
    finally:
        for side in sides.values():
            side.close()
    ours = {k: Figures(f"{label} {k}", v) for k, v in samples["corral"].items()}
    theirs = {k: Figures(f"raw {label} {k}", v) for k, v in samples["raw"].items()}
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per measure (>= 10)")
    parser.add_argument(
        "--breakdown", action="store_true", help="time each step of the daemon's path instead"
    )
    parser.add_argument(
        "--workload", choices=list(WORKLOADS), action="append", help="only these (default: all)"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="with --breakdown: also run a daemon from this checkout's src/ (before/after)",
    )
    parser.add_argument(
        "--no-fork", action="store_true", help="with --breakdown: leave out fork into 1 and 10"
    )
    args = parser.parse_args()
    runs = max(1, args.runs)
    workloads = {k: v for k, v in WORKLOADS.items() if not args.workload or k in args.workload}
    if args.breakdown:
        from lifecycle_breakdown import breakdown

        breakdown(runs, workloads, args.baseline_src, forks=not args.no_fork)
        return

    reap_forever()
    raw = RawRunsc()
    rows: list[tuple[Figures, Figures]] = []
    try:
        with private_daemon() as daemon, Client(daemon.url, daemon.key) as client:
            for label, hold in workloads.items():
                ours, theirs = measure_workload(client, raw, label, hold, runs)
                rows += [(ours[k], theirs[k]) for k in MEASURES]
    finally:
        raw.close()

    print(f"median of {runs} runs each (after one warm-up round; raw and corral in turn); ms")
    print(f"{'measure':22} {'corral p50':>11} {'raw p50':>9} {'ratio':>7} {'corral p99':>11}")
    for ours_fig, raw_fig in rows:
        ratio = ours_fig.p50 / raw_fig.p50
        print(
            f"{ours_fig.name:22} {ours_fig.p50:11.1f} {raw_fig.p50:9.1f} "
            f"{ratio:6.2f}x {ours_fig.p99:11.1f}"
        )
    by_name = {ours_fig.name: (ours_fig, raw_fig) for ours_fig, raw_fig in rows}
    print()
    for label in workloads:
        for what in ("park", "wake", "snapshot", "restore"):
            ours_fig, raw_fig = by_name[f"{label} {what}"]
            print(ratio_goal_line(f"{label} {what}", ours_fig.p50, raw_fig.p50, 1.3, "raw"))
        ours_fig, raw_fig = by_name[f"{label} fork 10"]
        print(ratio_goal_line(f"{label} fork into 10", ours_fig.p50, raw_fig.p50, 1.5, "raw"))
    if "idle" in workloads:
        fork10 = by_name["idle fork 10"][0]
        print(goal_line("idle fork into 10, in total", fork10.p50, 2000, "ms", "issue 14"))


if __name__ == "__main__":
    main()
