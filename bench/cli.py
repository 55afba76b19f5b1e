"""The CLI as a whole process: `corral --help`, `corral exec ID -- true`, `corral ls`.

    .venv/bin/python bench/cli.py [--runs 15]

Each command is started, run to its end and reaped by this bench; its wall time is from spawn to
reap, its CPU time (user + sys) as the kernel accounted it. The commands are run
in turn (A B C D E, A B C D E, ...) so that load from elsewhere on the host weighs on all alike,
beside the floors of any Python CLI measured in the same run: `python3 -c pass` and
`python3 -I -S -c pass` (the interpreter the `corral` script runs on). The exec and ls commands
talk to a private daemon and one idle sandbox; the SDK's in-process exec round trip is printed
beside them to show what the process start costs.

Goals (issue 14): `corral exec ID -- true` under 150 ms, `corral --help` under 100 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import CORRAL, Figures, private_daemon, timed
from _measure import ProcessRun, goal_line, whole_process

from corral import Sandbox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    python = sys.executable
    with private_daemon() as daemon, Sandbox.create(url=daemon.url, api_key=daemon.key) as sbx:
        env = {**os.environ, "CORRAL_URL": daemon.url, "CORRAL_API_KEY": daemon.key}
        commands = {
            "python3 -c pass": [python, "-c", "pass"],
            "python3 -I -S -c pass": [python, "-I", "-S", "-c", "pass"],
            "corral --help": [CORRAL, "--help"],
            "corral exec ID -- true": [CORRAL, "exec", sbx.id, "--", "true"],
            "corral ls": [CORRAL, "ls"],
        }
        runs: dict[str, list[ProcessRun]] = {name: [] for name in commands}
        for i in range(args.runs + 1):  # the first round warms up (page cache, .pyc files)
            for name, argv in commands.items():
                run = whole_process(argv, env)
                if run.exit_code != 0:
                    raise RuntimeError(f"{name} exited {run.exit_code} (sandbox {sbx.id})")
                if i:
                    runs[name].append(run)
        time.sleep(0.2)
        sdk = Figures("SDK exec round trip (in-process)", timed(lambda: sbx.exec(["true"]), 20))

    base = Figures("", [r.wall_ms for r in runs["python3 -c pass"]]).p50
    print(f"whole process, {args.runs} runs each, taken in turn; ms")
    print(
        f"{'command':32} {'wall p50':>9} {'wall p99':>9} {'cpu p50':>9} "
        f"{'wall vs python3 -c pass':>24}"
    )
    walls: dict[str, Figures] = {}
    for name, samples in runs.items():
        wall = walls[name] = Figures(name, [r.wall_ms for r in samples])
        cpu = Figures(name, [r.cpu_ms for r in samples])
        print(f"{name:32} {wall.p50:9.1f} {wall.p99:9.1f} {cpu.p50:9.1f} {wall.p50 / base:23.2f}x")
    print(f"{sdk.name:32} {sdk.p50:9.1f} {sdk.p99:9.1f}")
    print()
    print(goal_line("`corral --help`", walls["corral --help"].p50, 100, "ms", "issue 14"))
    exec_wall = walls["corral exec ID -- true"].p50
    print(goal_line("`corral exec ID -- true`", exec_wall, 150, "ms", "issue 14"))


if __name__ == "__main__":
    main()
