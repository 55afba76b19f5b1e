"""Create → first output and exec round trip, beside raw runsc measured in the same run.

    .venv/bin/python bench/sandbox_latency.py [--runs 30] [--breakdown]

Prints p50/p99 over the runs and the ratio to raw `runsc run` / `runsc exec` on the same base
image and platform (systrap). Also prints the host memory of an idle sandbox (PSS of all its host
processes) beside an idle raw runsc container.

What each clock covers:
- create → first output: from the create call until the stdout of `echo hi` reaches the caller
  (kill outside the clock); raw: from starting `runsc run` until `hi` is read from its stdout
  (bundle preparation and delete outside the clock).
- exec round trip: one `exec(["true"])` to its exit code; raw: one `runsc exec`.

``--breakdown`` times the phases of create instead, driving the mechanisms directly (see
``breakdown.py``), and measures the agent's imports inside a sandbox.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import BASE_ROOTFS, Figures, RawRunsc, private_daemon, report, timed, timed_inner

from corral import Sandbox


def pss_kib_of_tree(root_pids: list[int]) -> int:
    """Sum of PSS over the processes whose command line names the container id."""
    total = 0
    for pid in root_pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def pids_matching(token: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", token], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


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
        raw_run = Figures(
            "raw runsc run: echo hi → first output",
            timed_inner(lambda: raw.run_first_output(["echo", "hi"], b"hi\n"), args.runs),
        )
        cid = raw.start_idle()
        time.sleep(0.5)
        raw_exec = Figures(
            "raw runsc exec: true", timed(lambda: raw.exec(cid, ["true"]), args.runs)
        )
        raw_pss = pss_kib_of_tree(pids_matching(cid))
        raw.delete(cid)

        with private_daemon() as daemon:
            kw = {"url": daemon.url, "api_key": daemon.key}

            def create_first_output() -> float:
                """ms from the create call to the arrival of echo's output; kill not counted."""
                arrived: list[float] = []
                started = time.perf_counter()
                sbx = Sandbox.create(**kw)
                try:
                    result = sbx.exec(
                        ["echo", "hi"], on_stdout=lambda _text: arrived.append(time.perf_counter())
                    )
                    assert result.stdout == "hi\n" and arrived
                finally:
                    sbx.kill()
                return (arrived[0] - started) * 1000

            created = Figures(
                "corral create → first output of echo", timed_inner(create_first_output, args.runs)
            )
            sbx = Sandbox.create(**kw)
            exec_rt = Figures(
                "corral exec round trip: true", timed(lambda: sbx.exec(["true"]), args.runs * 3)
            )
            time.sleep(1)
            corral_pss = pss_kib_of_tree(pids_matching(sbx.id))
            sbx.kill()
        report([(created, raw_run), (exec_rt, raw_exec)])
        print()
        print(f"idle raw runsc container (sleep):   {raw_pss / 1024:7.1f} MiB PSS")
        print(f"idle corral sandbox (agent):         {corral_pss / 1024:7.1f} MiB PSS")
        print(f"corral beyond runsc's own:           {(corral_pss - raw_pss) / 1024:7.1f} MiB")
    finally:
        raw.close()


if __name__ == "__main__":
    main()
