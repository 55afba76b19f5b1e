"""Create → first output and exec round trip, beside raw runsc measured in the same run.

    .venv/bin/python bench/sandbox_latency.py [--runs 30]

Prints p50/p99 over the runs and the ratio to raw `runsc run` / `runsc exec` on the same base
image and platform (systrap). Also prints the host memory of an idle sandbox (PSS of all its host
processes) beside an idle raw runsc container.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, RawRunsc, private_daemon, report, timed

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
    args = parser.parse_args()
    raw = RawRunsc()
    try:
        raw_run = Figures(
            "raw runsc run: echo hi", timed(lambda: raw.run(["echo", "hi"]), args.runs)
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

            def create_first_output() -> None:
                sbx = Sandbox.create(**kw)
                try:
                    assert sbx.exec(["echo", "hi"]).stdout == "hi\n"
                finally:
                    sbx.kill()

            created = Figures(
                "corral create → first output of echo", timed(create_first_output, args.runs)
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
