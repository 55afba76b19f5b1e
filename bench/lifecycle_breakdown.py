"""Where the time of park, wake, fork, snapshot and restore goes, step by step, beside raw runsc.

    .venv/bin/python bench/lifecycle.py --breakdown [--runs N]

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
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
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


def measure(
    client: Client, api: TimedApi, raw: RawRunsc, label: str, hold: str | None, runs: int
) -> tuple[dict[str, list[Sample]], dict[str, list[float]]]:
    ours: dict[str, list[Sample]] = defaultdict(list)
    theirs: dict[str, list[float]] = defaultdict(list)
    raw_side = RawSide(raw, hold)
    corral = CorralTimed(client, api, label, hold)
    try:
        for i in range(runs + 1):
            raw_park, raw_wake = raw_side.park_wake()
            park, wake = corral.park_wake()
            if i:
                theirs["park"].append(raw_park)
                theirs["wake"].append(raw_wake)
                ours["park"].append(park)
                ours["wake"].append(wake)
        for count in (1, 10):
            for i in range(runs + 1):
                raw_took = raw_side.fork(count)
                took = corral.fork(count)
                if i:
                    theirs[f"fork {count}"].append(raw_took)
                    ours[f"fork {count}"].append(took)
        for i in range(runs + 1):
            raw_took, raw_back = raw_side.snapshot_restore(i)
            took, back = corral.snapshot_restore(i)
            if i:
                theirs["snapshot"].append(raw_took)
                theirs["restore"].append(raw_back)
                ours["snapshot"].append(took)
                ours["restore"].append(back)
    finally:
        corral.close()
        raw_side.close()
    return ours, theirs


def median_of(samples: list[Sample], name: str) -> float:
    return statistics.median(s.get(name, 0.0) for s in samples)


def print_measure(label: str, what: str, samples: list[Sample], raw: list[float]) -> None:
    client, raw_p50 = median_of(samples, "client"), statistics.median(raw)
    total = median_of(samples, "total")
    names = sorted(
        {n for s in samples for n in s} - {"client", "total"},
        key=lambda n: -median_of(samples, n),
    )
    runsc = statistics.median(
        sum(ms for n, ms in s.items() if n.startswith("runsc ")) for s in samples
    )
    own = statistics.median(
        s.get("total", 0.0) - sum(ms for n, ms in s.items() if n.startswith("runsc "))
        for s in samples
    )
    print(
        f"{label} {what}: corral {client:.1f} ms, raw {raw_p50:.1f} ms "
        f"({client / raw_p50:.2f}x); daemon {total:.1f} ms, of it runsc {runsc:.1f}, own {own:.1f}"
    )
    for name in names:
        print(f"    {name:20} {median_of(samples, name):8.1f}")
    if not what.startswith("fork"):
        unmarked = statistics.median(
            s.get("total", 0.0) - sum(ms for n, ms in s.items() if n not in ("client", "total"))
            for s in samples
        )
        print(f"    {'(unmarked)':20} {unmarked:8.1f}")
    http = statistics.median(s["client"] - s.get("total", 0.0) for s in samples)
    print(f"    {'(http + client)':20} {http:8.1f}")


def breakdown(runs: int, workloads: dict[str, str | None]) -> None:
    reap_forever()
    raw = RawRunsc()
    results: list[tuple[str, dict[str, list[Sample]], dict[str, list[float]]]] = []
    try:
        with (
            private_daemon({"CORRAL_SERVER_TIMING": "1"}) as daemon,
            Client(daemon.url, daemon.key) as client,
        ):
            api = TimedApi(daemon.url, daemon.key)
            try:
                for label, hold in workloads.items():
                    ours, theirs = measure(client, api, raw, label, hold, runs)
                    results.append((label, ours, theirs))
            finally:
                api.close()
    finally:
        raw.close()
    print(f"medians of {runs} runs (after one warm-up round; raw runsc and corral in turn); ms")
    for label, ours, theirs in results:
        for what in MEASURES:
            print_measure(label, what, ours[what], theirs[what])
        print()
