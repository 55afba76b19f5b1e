"""Whole-process times of the CLI beside `python -c pass`, measured in the same run.

    .venv/bin/python bench/cli.py [--runs 20]

Times `corral --help`, `corral exec --help` and `corral exec ID -- true` (against a private
daemon, see `_harness.private_daemon`) as whole processes, from spawn to exit, beside the
interpreter doing nothing (`python -c pass`, the floor of any Python command). The commands run
in turn, one sample of each per round, so load from elsewhere on the host weighs on all alike.
The round trip of the same exec from inside one process (the SDK, already imported and
connected) is printed too: what `corral exec` adds to it is the CLI's own cost.
Goals (issue 14): `corral --help` under 100 ms, `corral exec ID -- true` under 150 ms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import CORRAL, Figures, private_daemon, report

from corral import Client

GOALS_MS = {"corral --help": 100.0, "corral exec ID -- true": 150.0}


def spawn_ms(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with private_daemon() as daemon:
        env = {**os.environ, "CORRAL_URL": daemon.url, "CORRAL_API_KEY": daemon.key}
        with Client(daemon.url, daemon.key) as client:
            sandbox = client.create_sandbox()
            try:
                commands = {
                    "python -c pass": [sys.executable, "-c", "pass"],
                    "corral --help": [CORRAL, "--help"],
                    "corral exec --help": [CORRAL, "exec", "--help"],
                    "corral exec ID -- true": [CORRAL, "exec", sandbox.id, "--", "true"],
                }
                samples: dict[str, list[float]] = {name: [] for name in commands}
                in_process: list[float] = []
                for _ in range(2):  # warm-up: page cache, the sandbox's first exec
                    for argv in commands.values():
                        spawn_ms(argv, env)
                for _ in range(args.runs):
                    for name, argv in commands.items():
                        samples[name].append(spawn_ms(argv, env))
                    started = time.perf_counter()
                    sandbox.exec(["true"])
                    in_process.append((time.perf_counter() - started) * 1000)
            finally:
                sandbox.kill()
    baseline = Figures("python -c pass", samples.pop("python -c pass"))
    figures = {name: Figures(name, values) for name, values in samples.items()}
    round_trip = Figures("exec ID -- true, in process (SDK)", in_process)
    report([(fig, baseline) for fig in figures.values()] + [(round_trip, None)])
    cli_cost = figures["corral exec ID -- true"].p50 - round_trip.p50
    print(f"\ncorral exec's own cost (p50 minus the in-process round trip): {cli_cost:.1f} ms")
    print()
    for name, goal in GOALS_MS.items():
        p50 = figures[name].p50
        verdict = "met" if p50 < goal else "not met"
        print(f"goal {name}: under {goal:.0f} ms; p50 {p50:.1f} ms ({verdict} on this host)")


if __name__ == "__main__":
    main()
