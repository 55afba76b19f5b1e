"""The spawn floor: posix_spawn + waitpid of ``/bin/true``, timed INSIDE a sandbox.

No exec through corral can be faster than starting a process inside gVisor, so issue 14 states
the exec and ready-pool goals as this floor plus a few ms. The loop runs in one Python process
inside the sandbox (started through corral exec, outside the clock) and prints its own samples.

The ready-pool benches time the first output of ``echo hi``, which costs more than ``true``
(it writes, and its output has to be read): ``echo_floor`` is the same loop for
``/bin/echo hi`` with its stdout on a pipe read to its end, printed beside the pool's goal so
a reader sees how much of the gap is the command's own (the goal stays the ``true`` floor's).

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


# The same for `/bin/echo hi` with its stdout on a pipe, read to EOF before the wait.
ECHO_LOOP = """
import os, sys, time
n = int(sys.argv[1])
samples = []
for i in range(n + 5):
    started = time.perf_counter()
    r, w = os.pipe()
    pid = os.posix_spawn("/bin/echo", ["/bin/echo", "hi"], os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_CLOSE, r)])
    os.close(w)
    while os.read(r, 65536):
        pass
    os.close(r)
    os.waitpid(pid, 0)
    samples.append((time.perf_counter() - started) * 1000)
print(" ".join(f"{s:.4f}" for s in samples[5:]))
"""


def _loop(sbx: Sandbox, loop: str, runs: int, name: str) -> Figures:
    result = sbx.exec(["python3", "-c", loop, str(runs)], timeout=300)
    if result.exit_code != 0:
        raise RuntimeError(
            f"the {name} loop failed in sandbox {sbx.id} (exit {result.exit_code}): "
            f"{result.stderr.strip()[-400:]}"
        )
    return Figures(name, [float(x) for x in result.stdout.split()])


def spawn_floor(sbx: Sandbox, runs: int = 200) -> Figures:
    """The spawn floor measured inside ``sbx`` (``runs`` samples)."""
    return _loop(sbx, SPAWN_LOOP, runs, "in-sandbox floor: posix_spawn+wait /bin/true")


def echo_floor(sbx: Sandbox, runs: int = 200) -> Figures:
    """``echo hi``'s own floor inside ``sbx``: spawned with its stdout on a pipe, read to EOF."""
    return _loop(sbx, ECHO_LOOP, runs, "in-sandbox echo hi, stdout piped")


def echo_note(pool_p50: float, floor: Figures, echo: Figures) -> str:
    """The line printed under a ready pool's goal: what `echo hi` itself costs over `true`."""
    return (
        f"  (the pool's first output is `echo hi`'s, whose own floor with its stdout piped is "
        f"{echo.p50:.1f} ms, {echo.p50 - floor.p50:+.1f} over the goal's `true`; against it "
        f"the pool is {pool_p50 - echo.p50:+.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with private_daemon() as daemon, Sandbox.create(url=daemon.url, api_key=daemon.key) as sbx:
        floors = [spawn_floor(sbx, args.runs), echo_floor(sbx, args.runs)]
    print(f"{'measure':44} {'p50 ms':>9} {'p99 ms':>9}")
    for floor in floors:
        print(f"{floor.name:44} {floor.p50:9.2f} {floor.p99:9.2f}")


if __name__ == "__main__":
    main()
