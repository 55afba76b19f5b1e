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

Run: ``.venv/bin/python bench/lifecycle.py [--runs N]`` (root, real runsc).
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


# -- corral --------------------------------------------------------------------------------------


def corral_figures(client: Client, label: str, hold: str | None, runs: int) -> dict[str, Figures]:
    memory = 512 if hold else 256
    sbx = client.create_sandbox(memory_mib=memory)
    out: dict[str, list[float]] = {
        k: [] for k in ("park", "wake", "fork 1", "fork 10", "snapshot", "restore")
    }
    try:
        if hold:
            sbx.exec_background(["python3", "-c", hold])
            while sbx.exec(["test", "-e", "/tmp/ready"]).exit_code != 0:
                time.sleep(0.1)
        for i in range(runs + 1):  # the first round warms up
            _, park = timed_call(sbx.park)
            _, wake = timed_call(sbx.wake)
            if i:
                out["park"].append(park)
                out["wake"].append(wake)
        for count in (1, 10):
            for i in range(runs + 1):
                children, took = timed_call(sbx.fork, count)
                assert len(children) == count
                for child in children:
                    child.kill()
                if i:
                    out[f"fork {count}"].append(took)
        for i in range(runs + 1):
            name = f"bench-{label}-{i}"
            _, took = timed_call(sbx.snapshot, name)
            restored, back = timed_call(lambda: client.create_sandbox(snapshot=name))  # noqa: B023
            restored.kill()
            client.remove_snapshot(name)
            if i:
                out["snapshot"].append(took)
                out["restore"].append(back)
    finally:
        sbx.kill()
    return {k: Figures(f"{label} {k}", v) for k, v in out.items()}


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


def raw_figures(raw: RawRunsc, label: str, hold: str | None, runs: int) -> dict[str, Figures]:
    work = Path(tempfile.mkdtemp(prefix="corral-bench-images-"))
    out: dict[str, list[float]] = {
        k: [] for k in ("park", "wake", "fork 1", "fork 10", "snapshot", "restore")
    }
    cid = raw.start_detached(["python3", "-c", hold or IDLE])
    time.sleep(2.0 if hold else 0.5)  # let it allocate and touch its memory
    live = {cid}
    try:
        for i in range(runs + 1):
            image = work / f"park-{i}"
            park = raw.checkpoint(cid, image)
            raw.delete(cid)
            live.discard(cid)
            cid, wake = raw.restore(image, cid)
            live.add(cid)
            shutil.rmtree(image)
            if i:
                out["park"].append(park)
                out["wake"].append(wake)
        for count in (1, 10):
            for i in range(runs + 1):
                image = work / f"fork-{count}-{i}"
                started = time.perf_counter()
                raw.checkpoint(cid, image, leave_running=True)
                with ThreadPoolExecutor(FORK_CONCURRENCY) as pool:
                    made = list(pool.map(raw.restore, [image] * count, [cid] * count))
                took = (time.perf_counter() - started) * 1000
                with ThreadPoolExecutor(FORK_CONCURRENCY) as pool:
                    list(pool.map(raw.delete, [child for child, _ in made]))
                shutil.rmtree(image)
                if i:
                    out[f"fork {count}"].append(took)
        for i in range(runs + 1):
            image = work / f"snap-{i}"
            took = raw.checkpoint(cid, image, leave_running=True)
            child, back = raw.restore(image, cid)
            raw.delete(child)
            shutil.rmtree(image)
            if i:
                out["snapshot"].append(took)
                out["restore"].append(back)
    finally:
        for container in live:
            raw.delete(container)
        shutil.rmtree(work, ignore_errors=True)
    return {k: Figures(f"raw {label} {k}", v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per measure (>= 10)")
    args = parser.parse_args()
    runs = max(1, args.runs)

    reap_forever()
    raw = RawRunsc()
    rows: list[tuple[Figures, Figures]] = []
    try:
        baselines = {
            label: raw_figures(raw, label, hold, runs) for label, hold in WORKLOADS.items()
        }
    finally:
        raw.close()
    with private_daemon() as daemon, Client(daemon.url, daemon.key) as client:
        for label, hold in WORKLOADS.items():
            ours = corral_figures(client, label, hold, runs)
            rows += [(ours[k], baselines[label][k]) for k in ours]

    print(f"median of {runs} runs each (after one warm-up round); ms")
    print(f"{'measure':22} {'corral p50':>11} {'raw p50':>9} {'ratio':>7} {'corral p99':>11}")
    for ours_fig, raw_fig in rows:
        ratio = ours_fig.p50 / raw_fig.p50
        print(
            f"{ours_fig.name:22} {ours_fig.p50:11.1f} {raw_fig.p50:9.1f} "
            f"{ratio:6.2f}x {ours_fig.p99:11.1f}"
        )
    by_name = {ours_fig.name: (ours_fig, raw_fig) for ours_fig, raw_fig in rows}
    print()
    for label in WORKLOADS:
        for what in ("park", "wake", "snapshot", "restore"):
            ours_fig, raw_fig = by_name[f"{label} {what}"]
            print(ratio_goal_line(f"{label} {what}", ours_fig.p50, raw_fig.p50, 1.3, "raw"))
        ours_fig, raw_fig = by_name[f"{label} fork 10"]
        print(ratio_goal_line(f"{label} fork into 10", ours_fig.p50, raw_fig.p50, 1.5, "raw"))
    fork10 = by_name["idle fork 10"][0]
    print(goal_line("idle fork into 10, in total", fork10.p50, 2000, "ms", "issue 14"))


if __name__ == "__main__":
    main()
