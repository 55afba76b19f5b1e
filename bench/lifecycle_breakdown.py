"""Where the time of park, wake, fork, snapshot and restore goes, step by step, beside raw runsc.

    .venv/bin/python bench/lifecycle.py --breakdown [--runs N] [--workload idle]
        [--baseline-src DIR]

The daemon runs with ``server_timing`` on: every answer carries a ``Server-Timing`` header with
the wall time of each step its path marked (``corral/timing.py``): runsc calls (``runsc
restore``, ``runsc checkpoint``, ``runsc delete``), record commits (``db commit``), the disk
(``disk create``/``disk remove``), the console tmpfs, the slot (``slot lease``/``prepare``/
``release``/``traffic``), egress, the agent link (``agent ready``, ``agent rekey``), the image
(``image fsync``, ``seal``, ``chmod``, ``size``, ``remove``), admission and space checks.
The calls go over one kept-alive httpx connection (no SDK), and each round times raw runsc
first, then corral, as ``bench/lifecycle.py`` does.

For each measure it prints corral's median against raw runsc's in the same run, then the median
of every phase, ``unmarked`` (the daemon's time no mark covers: the total less the phases; for a
fork, whose children restore 4 at a time, the phases add up to more than the wall time and this
is not shown) and ``http`` (the client's wall time less the daemon's). ``own`` is the daemon's
time less its runsc calls: corral's share, the figure each change should cut.

``--baseline-src DIR`` (the ``src`` of another checkout, e.g. ``git archive`` of the commit
before a change) runs a second daemon on that code (``PYTHONPATH``) in the same rounds, so a
change's before and after are measured in one run, each beside the same raw runsc figures.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from _harness import RawRunsc, private_daemon
from lifecycle import RawSide, reap_forever

from corral import Client

MEASURES = ("park", "wake", "fork 1", "fork 10", "snapshot", "restore")
Sample = dict[str, float]  # phase -> ms, plus "client", "total"


def parse_server_timing(header: str) -> Sample:
    """``name;dur=MS[;desc=...]`` entries as {name: ms} (spaces were written as ``-``)."""
    sample: Sample = {}
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        name = fields[0].replace("-", " ")
        for field in fields[1:]:
            if field.startswith("dur="):
                sample[name] = sample.get(name, 0.0) + float(field[4:])
    return sample


class TimedApi:
    """The daemon's API over one kept-alive connection; each call's timing kept."""

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300
        )

    def call(self, method: str, path: str, body: Any = None) -> tuple[Any, Sample]:
        started = time.perf_counter()
        response = self.http.request(method, path, json=body)
        client = (time.perf_counter() - started) * 1000
        response.raise_for_status()
        sample = parse_server_timing(response.headers.get("server-timing", ""))
        sample["client"] = client
        return (response.json() if response.content else None), sample

    def kill(self, sandbox_id: str) -> None:
        self.http.delete(f"/v1/sandboxes/{sandbox_id}").raise_for_status()

    def close(self) -> None:
        self.http.close()


class CorralTimed:
    """One corral sandbox of the workload (made through the SDK), timed through ``TimedApi``."""

    def __init__(self, client: Client, api: TimedApi, label: str, hold: str | None) -> None:
        self.api, self.label = api, label
        self.sbx = client.create_sandbox(memory_mib=512 if hold else 256)
        if hold:
            self.sbx.exec_background(["python3", "-c", hold])
            while self.sbx.exec(["test", "-e", "/tmp/ready"]).exit_code != 0:
                time.sleep(0.1)

    def park_wake(self) -> tuple[Sample, Sample]:
        _, park = self.api.call("POST", f"/v1/sandboxes/{self.sbx.id}/park")
        _, wake = self.api.call("POST", f"/v1/sandboxes/{self.sbx.id}/wake")
        return park, wake

    def fork(self, count: int) -> Sample:
        made, sample = self.api.call("POST", f"/v1/sandboxes/{self.sbx.id}/fork", {"count": count})
        for child in made["sandboxes"]:
            self.api.kill(child["id"])
        return sample

    def snapshot_restore(self, i: int) -> tuple[Sample, Sample]:
        name = f"bd-{self.label}-{i}"
        _, took = self.api.call("POST", f"/v1/sandboxes/{self.sbx.id}/snapshots", {"name": name})
        restored, back = self.api.call("POST", "/v1/sandboxes", {"snapshot": name})
        self.api.kill(restored["id"])
        self.api.http.delete(f"/v1/snapshots/{name}").raise_for_status()
        return took, back

    def close(self) -> None:
        self.api.kill(self.sbx.id)


Samples = dict[str, list[Sample]]


def measure(
    daemons: list[tuple[Client, TimedApi]],
    raw: RawRunsc,
    label: str,
    hold: str | None,
    runs: int,
    fork_counts: tuple[int, ...] = (1, 10),
) -> tuple[list[Samples], dict[str, list[float]]]:
    """Samples of each daemon (in order) and raw runsc's, taken in turn round by round."""
    ours: list[Samples] = [defaultdict(list) for _ in daemons]
    theirs: dict[str, list[float]] = defaultdict(list)
    raw_side = RawSide(raw, hold)
    sides = []
    try:
        sides = [CorralTimed(client, api, label, hold) for client, api in daemons]
        for i in range(runs + 1):
            raw_park, raw_wake = raw_side.park_wake()
            taken = [side.park_wake() for side in sides]
            if i:
                theirs["park"].append(raw_park)
                theirs["wake"].append(raw_wake)
                for mine, (park, wake) in zip(ours, taken, strict=True):
                    mine["park"].append(park)
                    mine["wake"].append(wake)
        for count in fork_counts:
            for i in range(runs + 1):
                raw_took = raw_side.fork(count)
                forks = [side.fork(count) for side in sides]
                if i:
                    theirs[f"fork {count}"].append(raw_took)
                    for mine, took in zip(ours, forks, strict=True):
                        mine[f"fork {count}"].append(took)
        for i in range(runs + 1):
            raw_took, raw_back = raw_side.snapshot_restore(i)
            taken = [side.snapshot_restore(i) for side in sides]
            if i:
                theirs["snapshot"].append(raw_took)
                theirs["restore"].append(raw_back)
                for mine, (took, back) in zip(ours, taken, strict=True):
                    mine["snapshot"].append(took)
                    mine["restore"].append(back)
    finally:
        for side in sides:
            side.close()
        raw_side.close()
    return ours, theirs


def median_of(samples: list[Sample], name: str) -> float:
    return statistics.median(s.get(name, 0.0) for s in samples)


def _runsc(sample: Sample) -> float:
    return sum(ms for n, ms in sample.items() if n.startswith("runsc "))


def print_measure(
    label: str, what: str, runs: list[list[Sample]], raw: list[float], names: list[str]
) -> None:
    """One measure: each daemon's median (and ratio to raw), then every phase side by side."""
    raw_p50 = statistics.median(raw)
    heads = []
    for name, samples in zip(names, runs, strict=True):
        client = median_of(samples, "client")
        own = statistics.median(s.get("total", 0.0) - _runsc(s) for s in samples)
        heads.append(f"{name} {client:.1f} ms ({client / raw_p50:.2f}x raw), own {own:.1f}")
    print(f"{label} {what}: raw runsc {raw_p50:.1f} ms; " + "; ".join(heads))
    phases = sorted(
        {n for samples in runs for s in samples for n in s} - {"client", "total"},
        key=lambda n: -median_of(runs[0], n),
    )
    print(f"    {'phase':20}" + "".join(f" {name:>10}" for name in names))
    for phase in phases:
        print(f"    {phase:20}" + "".join(f" {median_of(r, phase):10.1f}" for r in runs))
    extra: list[tuple[str, list[float]]] = [
        ("(runsc, all)", [statistics.median(_runsc(s) for s in r) for r in runs]),
        ("(daemon total)", [median_of(r, "total") for r in runs]),
    ]
    if not what.startswith("fork"):  # concurrent children: the phases overlap
        extra.append(
            (
                "(unmarked)",
                [
                    statistics.median(
                        s.get("total", 0.0)
                        - sum(ms for n, ms in s.items() if n not in ("client", "total"))
                        for s in r
                    )
                    for r in runs
                ],
            )
        )
    extra.append(
        (
            "(http + client)",
            [statistics.median(s["client"] - s.get("total", 0.0) for s in r) for r in runs],
        )
    )
    for title, values in extra:
        print(f"    {title:20}" + "".join(f" {v:10.1f}" for v in values))


def breakdown(
    runs: int,
    workloads: dict[str, str | None],
    baseline_src: Path | None = None,
    forks: bool = True,
) -> None:
    """Print the breakdown; with ``baseline_src`` (another checkout's ``src``), a second daemon
    runs that code and is measured in the same rounds: before/after in one run. ``forks=False``
    leaves out fork into 1 and 10 (most of the run's time)."""
    reap_forever()
    raw = RawRunsc()
    timing = {"CORRAL_SERVER_TIMING": "1"}
    names = ["corral"] if baseline_src is None else ["this", "baseline"]
    results: list[tuple[str, list[Samples], dict[str, list[float]]]] = []
    try:
        with contextlib.ExitStack() as stack:
            daemons = []
            for name in names:
                env = dict(timing)
                if name == "baseline":
                    env["PYTHONPATH"] = str(baseline_src)
                daemon = stack.enter_context(private_daemon(env))
                client = stack.enter_context(Client(daemon.url, daemon.key))
                api = TimedApi(daemon.url, daemon.key)
                stack.callback(api.close)
                daemons.append((client, api))
            for label, hold in workloads.items():
                counts = (1, 10) if forks else ()
                ours, theirs = measure(daemons, raw, label, hold, runs, counts)
                results.append((label, ours, theirs))
    finally:
        raw.close()
    load = os.getloadavg()
    print(
        f"medians of {runs} runs (after one warm-up round; raw runsc and "
        + " and ".join(names)
        + f" in turn); ms; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end"
    )
    if baseline_src is not None:
        print(f"baseline: the daemon run from {baseline_src}")
    for label, ours, theirs in results:
        for what in (m for m in MEASURES if theirs[m]):
            print_measure(label, what, [o[what] for o in ours], theirs[what], names)
        print()
