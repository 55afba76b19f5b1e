"""The spawn floor: posix_spawn + waitpid of ``/bin/true``, timed INSIDE a sandbox.

No exec through corral can be faster than starting a process inside gVisor, so issue 14 states
the exec and ready-pool goals as this floor plus a few ms. The loop runs in one Python process
inside the sandbox (started through corral exec, outside the clock) and prints its own samples.

    .venv/bin/python bench/floor.py [--runs 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, private_daemon

from corral import Sandbox

# Runs inside the sandbox: N timed spawns after 5 untimed ones, each sample in ms on one line.
SPAWN_LOOP = """
import os, sys, time
n = int(sys.argv[1])
samples = []
for i in range(n + 5):
    started = time.perf_counter()
    pid = os.posix_spawn("/bin/true", ["/bin/true"], os.environ)
    os.waitpid(pid, 0)
    samples.append((time.perf_counter() - started) * 1000)
print(" ".join(f"{s:.4f}" for s in samples[5:]))
"""


def spawn_floor(sbx: Sandbox, runs: int = 200) -> Figures:
    """The spawn floor measured inside ``sbx`` (``runs`` samples)."""
    result = sbx.exec(["python3", "-c", SPAWN_LOOP, str(runs)], timeout=300)
    if result.exit_code != 0:
        raise RuntimeError(
            f"the spawn-floor loop failed in sandbox {sbx.id} (exit {result.exit_code}): "
            f"{result.stderr.strip()[-400:]}"
        )
    samples = [float(x) for x in result.stdout.split()]
    return Figures("in-sandbox floor: posix_spawn+wait /bin/true", samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with private_daemon() as daemon, Sandbox.create(url=daemon.url, api_key=daemon.key) as sbx:
        floor = spawn_floor(sbx, args.runs)
    print(f"{'measure':44} {'p50 ms':>9} {'p99 ms':>9}")
    print(f"{floor.name:44} {floor.p50:9.2f} {floor.p99:9.2f}")


if __name__ == "__main__":
    main()
