"""Create → first output and exec round trip, beside raw runsc measured in the same run.

    .venv/bin/python bench/sandbox_latency.py [--runs 30] [--breakdown]

Prints p50/p99 over the runs and the ratio to raw `runsc run` / `runsc exec` on the same base
image and platform (systrap), and the goals of issue 14: create at most 1.3x raw `runsc run`,
exec at most the in-sandbox spawn floor (``floor.py``, measured in the same sandbox) + 3 ms. Also
prints the host memory of an idle sandbox (PSS of all its host processes, PSS and USS) beside an
idle raw runsc container (goal: under 10 MiB beyond it). Raw and corral samples are taken
alternately, so load from elsewhere on the host weighs on both alike.

What each clock covers:
- create → first output: from the create call until the stdout of `echo hi` reaches the caller
  (kill outside the clock); raw: from starting `runsc run` until `hi` is read from its stdout
  (bundle preparation and delete outside the clock).
- exec round trip: one `exec(["true"])` to its exit code; raw: one `runsc exec`.

``--breakdown`` times the phases of create instead, driving the mechanisms directly (see
``breakdown.py``) with the daemon's agent, and the Python agent's imports inside a sandbox when
that is the agent.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import BASE_ROOTFS, Figures, RawRunsc, private_daemon, report
from _measure import goal_line, memory_by_role, memory_table, pids_matching, ratio_goal_line
from floor import spawn_floor

from corral import Sandbox


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--breakdown", action="store_true", help="time the phases of create instead"
    )
    args = parser.parse_args()
    if args.breakdown:
        from breakdown import breakdown

        breakdown(args.runs, BASE_ROOTFS)
        return
    raw = RawRunsc()
    try:
        with private_daemon() as daemon:
            url, key = daemon.url, daemon.key

            def create_first_output() -> float:
                """ms from the create call to the arrival of echo's output; kill not counted."""
                arrived: list[float] = []
                started = time.perf_counter()
                sbx = Sandbox.create(url=url, api_key=key)
                try:
                    result = sbx.exec(
                        ["echo", "hi"], on_stdout=lambda _text: arrived.append(time.perf_counter())
                    )
                    assert result.stdout == "hi\n" and arrived
                finally:
                    sbx.kill()
                return (arrived[0] - started) * 1000

            # Raw and corral samples alternate, so the host's load weighs on both alike.
            raw_samples, corral_samples = interleaved(
                lambda: raw.run_first_output(["echo", "hi"], b"hi\n"),
                create_first_output,
                args.runs,
            )
            raw_run = Figures("raw runsc run: echo hi → first output", raw_samples)
            created = Figures("corral create → first output of echo", corral_samples)

            cid = raw.start_idle()
            sbx = Sandbox.create(url=url, api_key=key)
            time.sleep(0.5)

            def raw_exec_ms() -> float:
                started = time.perf_counter()
                raw.exec(cid, ["true"])
                return (time.perf_counter() - started) * 1000

            def corral_exec_ms() -> float:
                started = time.perf_counter()
                sbx.exec(["true"])
                return (time.perf_counter() - started) * 1000

            raw_samples, corral_samples = interleaved(raw_exec_ms, corral_exec_ms, args.runs * 3)
            raw_exec = Figures("raw runsc exec: true", raw_samples)
            exec_rt = Figures("corral exec round trip: true", corral_samples)
            # Memory while both have run the same commands (the floor below runs a Python loop
            # in the corral sandbox only, whose pages would be counted as the sandbox's own),
            # once both are idle: 3 s quiet, past the 2 s after which the agent gives back the
            # heap of a burst (src/corral/agent/go/memory.go).
            time.sleep(3)
            raw_memory = memory_by_role(pids_matching(raw.process_token(cid)))
            corral_memory = memory_by_role(pids_matching(sbx.id))
            floor = spawn_floor(sbx, max(50, args.runs * 5))
            sbx.kill()
            raw.delete(cid)
        report([(created, raw_run), (exec_rt, raw_exec)])
        print(f"{floor.name:44} {floor.p50:9.2f} {floor.p99:9.2f} {'(floor)':>10}")
        print()
        print(
            "idle sandbox (agent) beside an idle raw runsc container (sleep),"
            " each address space once"
        )
        lines, beyond_pss, _ = memory_table([corral_memory], [raw_memory])
        print("\n".join(lines))
        print()
        print(ratio_goal_line("cold create → first output", created.p50, raw_run.p50, 1.3, "raw"))
        floor_plus = floor.p50 + 3
        print(goal_line("exec round trip", exec_rt.p50, floor_plus, "ms", "spawn floor + 3 ms"))
        print(goal_line("memory beyond runsc own (PSS)", beyond_pss, 10, "MiB", "issue 14"))
    finally:
        raw.close()


def interleaved(
    first: Callable[[], float], second: Callable[[], float], runs: int, warmup: int = 2
) -> tuple[list[float], list[float]]:
    """Samples of two self-timing functions (each returns its ms), taken alternately."""
    for _ in range(warmup):
        first()
        second()
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs):
        a.append(first())
        b.append(second())
    return a, b


if __name__ == "__main__":
    main()
