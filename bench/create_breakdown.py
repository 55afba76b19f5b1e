"""Where the ms of a cold create → first output go, step by step, beside raw `runsc run`.

    .venv/bin/python bench/create_breakdown.py [--runs 15] [--baseline-src DIR]

A private daemon (its default agent, ``server_timing`` on), no pool, no warm image: every create
boots cold. Each round takes, in turn with one raw `runsc run` of `echo hi` on the same base
image (``_harness.RawRunsc``, the baseline of ``sandbox_latency.py``):

    API create            `POST /v1/sandboxes` over a kept-alive connection, to its answer
    API first exec        then `POST /v1/sandboxes/ID/exec` of `echo hi` to its first stdout
    API create → output   the two as one span
    SDK create → output   `Sandbox.create` + `exec` with the sync SDK (sandbox_latency.py's clock)

The create's answer names its phases (``Server-Timing``, each phase its own time; the slot's
set-up runs beside the runtime's boot, so ``slot prepare`` and ``egress attach`` overlap the
others); their medians follow, with the daemon's CPU per step. ``--baseline-src DIR`` (the
``src`` of another checkout, e.g. ``git archive`` of main) runs a second daemon on that code,
measured in the same rounds: a before/after in one run. The load average is printed before and
after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Daemon, Figures, RawRunsc, private_daemon
from _measure import ratio_goal_line
from claim_breakdown import Api
from exec_breakdown import _cpu_ms
from lifecycle_breakdown import parse_server_timing

from corral import Sandbox

STEPS = ("API create", "API first exec", "API create → output", "SDK create → output")


class Measured:
    """One daemon's samples: ms per step, the daemon's CPU per step, the create's phases."""

    def __init__(self, name: str, daemon: Daemon) -> None:
        self.name = name
        self.daemon = daemon
        self.api = Api(daemon.url, daemon.key)
        self.samples: dict[str, list[float]] = {step: [] for step in STEPS}
        self.cpu: dict[str, float] = dict.fromkeys(STEPS, 0.0)
        self.phases: dict[str, list[float]] = {}

    def round(self, keep: bool) -> None:
        pid = self.daemon.process.pid
        self.api.reconnect()
        cpu0 = _cpu_ms(pid)
        t0 = time.perf_counter()
        response = self.api.request("POST", "/v1/sandboxes", {})
        answer = json.loads(response.read())
        t1, cpu1 = time.perf_counter(), _cpu_ms(pid)
        if answer["state"] != "running":
            raise RuntimeError(f"the create answered {answer}")
        first = self.api.exec_first_output(answer["id"])
        cpu2 = _cpu_ms(pid)
        self.api.kill(answer["id"])
        arrived: list[float] = []
        started = time.perf_counter()
        sbx = Sandbox.create(url=self.daemon.url, api_key=self.daemon.key)
        try:
            sbx.exec(["echo", "hi"], on_stdout=lambda _t: arrived.append(time.perf_counter()))
        finally:
            sbx.kill()
        if not keep:
            return
        self.samples["SDK create → output"].append((arrived[0] - started) * 1000)
        for name, ms in parse_server_timing(response.getheader("server-timing", "")).items():
            self.phases.setdefault(name, []).append(ms)
        for name, seconds, spent in (
            ("API create", t1 - t0, cpu1 - cpu0),
            ("API first exec", first - t1, cpu2 - cpu1),
            ("API create → output", first - t0, cpu2 - cpu0),
        ):
            self.samples[name].append(seconds * 1000)
            self.cpu[name] += spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src, measured too")
    args = parser.parse_args()
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    raw = RawRunsc()
    raw_samples: list[float] = []
    measured: list[Measured] = []
    try:
        with contextlib.ExitStack() as stack:
            names = ["this"] if args.baseline_src is None else ["this", "baseline"]
            for name in names:
                env = {"CORRAL_SERVER_TIMING": "1"}
                if name == "baseline":
                    env["PYTHONPATH"] = str(args.baseline_src.resolve())
                measured.append(Measured(name, stack.enter_context(private_daemon(env))))
            for i in range(args.runs + 2):  # two warm-up rounds
                raw_ms = raw.run_first_output(["echo", "hi"], b"hi\n")
                if i >= 2:
                    raw_samples.append(raw_ms)
                for one in measured if i % 2 else reversed(measured):
                    one.round(keep=i >= 2)
    finally:
        raw.close()
    raw_p50 = Figures("raw", raw_samples).p50
    print(f"cold create, {args.runs} rounds (after two warm-up rounds); ms, p50 (p99)")
    print(f"{'raw runsc run → output':28} {raw_p50:8.2f} ({Figures('raw', raw_samples).p99:.2f})")
    for one in measured:
        label = f" [{one.name}]" if len(measured) > 1 else ""
        for name in STEPS:
            figure = Figures(name, one.samples[name])
            spent = f"  daemon CPU {one.cpu[name] / args.runs:.1f}" if one.cpu[name] else ""
            print(f"{name + label:28} {figure.p50:8.2f} ({figure.p99:.2f}){spent}")
    print()
    print("the create's phases (Server-Timing, own time; 'total' is the daemon's wall), p50")
    print(f"  {'':26}" + "".join(f" {one.name:>9}" for one in measured))
    for name in dict.fromkeys(n for one in measured for n in one.phases):
        cells = []
        for one in measured:
            values = one.phases.get(name)
            cells.append(f" {Figures(name, values).p50:9.2f}" if values else f" {'-':>9}")
        print(f"  {name:26}" + "".join(cells))
    print()
    for one in measured:
        for name in ("API create → output", "SDK create → output"):
            p50 = Figures(name, one.samples[name]).p50
            print(ratio_goal_line(f"cold {name} [{one.name}]", p50, raw_p50, 1.3, "raw"))
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


if __name__ == "__main__":
    main()
