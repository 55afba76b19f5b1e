"""Where the ms of a ready-pool create → first output go, step by step, in one run.

    .venv/bin/python bench/claim_breakdown.py [--runs 20]

A template with a pool of 2 on a private daemon. Before each round the bench waits, untimed,
until the pool is full again and the daemon idle (the refill done), then takes in turn:

    API claim             `POST /v1/sandboxes {"template": ...}` over a kept-alive connection:
                          the claim alone (auth, admission, the record's update, the answer)
    API first exec        then `POST /v1/sandboxes/ID/exec` of `echo hi` on the sandbox just
                          claimed, to its first stdout event: what the claim leaves to the
                          first call (a frozen or cold agent would show here)
    API later exec        the same again on the same sandbox: the steady state, for comparison
    API claim → output    the three steps above as one span (claim to first output)
    SDK claim → output    `Sandbox.create` + `exec` with the sync SDK, as template_start.py
                          times it (a new client per sandbox, as a user's script does)

The daemon's CPU time per step (all its threads, from /proc) is printed beside each: what the
host spends, whatever the load. The daemon runs with ``server_timing`` on, so the claim's answer
names its phases (``Server-Timing``: ``pool pick``, ``db commit``, ...); their medians follow.
The baseline is the spawn floor measured inside a pooled sandbox in the same run; the goal
(issue 14) is create → first output at most the floor + 5 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, private_daemon
from _measure import goal_line
from exec_breakdown import _cpu_ms
from floor import echo_floor, echo_note, spawn_floor
from lifecycle_breakdown import Sample, parse_server_timing

from corral import Client, Sandbox, Template

TEMPLATE = "bench-claim"
POOL = 2


class Api:
    """One kept-alive http.client connection to the daemon."""

    def __init__(self, url: str, key: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.connection = http.client.HTTPConnection(host, int(port), timeout=60)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def reconnect(self) -> None:
        """A fresh connection, made now (untimed): the daemon closes idle ones after a few
        seconds, and a round waits longer than that for the pool to refill."""
        self.connection.close()
        self.connection.connect()

    def request(self, method: str, path: str, body: object | None) -> http.client.HTTPResponse:
        payload = None if body is None else json.dumps(body).encode()
        self.connection.request(method, path, payload, self.headers)
        response = self.connection.getresponse()
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: HTTP {response.status}: {response.read()!r}")
        return response

    def claim(self) -> tuple[str, Sample]:
        """The claimed sandbox's id and the phases the daemon reported for the claim."""
        response = self.request("POST", "/v1/sandboxes", {"template": TEMPLATE})
        answer = json.loads(response.read())
        if answer.get("pooled") or answer["state"] != "running":
            raise RuntimeError(f"the claim answered {answer}")
        return str(answer["id"]), parse_server_timing(response.getheader("server-timing", ""))

    def exec_first_output(self, sandbox_id: str) -> float:
        """Run `echo hi`; the perf_counter when its first stdout event arrived."""
        response = self.request("POST", f"/v1/sandboxes/{sandbox_id}/exec", {"cmd": ["echo", "hi"]})
        arrived = 0.0
        while True:
            line = response.readline()
            if not line:
                raise RuntimeError("the exec stream ended before the exit event")
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "stdout" and not arrived:
                arrived = time.perf_counter()
            if event.get("type") == "exit":
                response.read()
                if not arrived:
                    raise RuntimeError(f"`echo hi` printed nothing: {event}")
                return arrived

    def kill(self, sandbox_id: str) -> None:
        self.request("DELETE", f"/v1/sandboxes/{sandbox_id}", None).read()


def wait_pool_full(client: Client, daemon_pid: int) -> None:
    """Until the pool holds POOL ready sandboxes and the daemon has been idle for a moment."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if client.get_template(TEMPLATE).pool_ready >= POOL:
            break
        time.sleep(0.05)
    else:
        raise RuntimeError(f"the pool of {TEMPLATE} did not refill within 120 s")
    for _ in range(100):  # the refill's last steps (priming, logging) after it counts as ready
        before = _cpu_ms(daemon_pid)
        time.sleep(0.1)
        if _cpu_ms(daemon_pid) - before < 5:
            return


def _appender(arrived: list[float]) -> Callable[[str], None]:
    """An ``on_stdout`` callback noting when each piece of output arrived."""
    return lambda _text: arrived.append(time.perf_counter())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    steps = ["API claim", "API first exec", "API later exec", "API claim → output"]
    samples: dict[str, list[float]] = {name: [] for name in [*steps, "SDK claim → output"]}
    cpu: dict[str, float] = dict.fromkeys(samples, 0.0)
    phases: dict[str, list[float]] = {}
    with private_daemon({"CORRAL_SERVER_TIMING": "1"}) as daemon:
        pid = daemon.process.pid
        kw = {"url": daemon.url, "api_key": daemon.key}
        with Client(**kw) as client:
            Template.build(Template().from_image("base"), TEMPLATE, client=client, pool=POOL)
            api = Api(daemon.url, daemon.key)
            for i in range(args.runs + 2):  # two warm-up rounds
                keep = i >= 2
                wait_pool_full(client, pid)
                api.reconnect()
                cpu0 = _cpu_ms(pid)
                t0 = time.perf_counter()
                sandbox_id, claim_phases = api.claim()
                t1, cpu1 = time.perf_counter(), _cpu_ms(pid)
                first = api.exec_first_output(sandbox_id)
                t2, cpu2 = time.perf_counter(), _cpu_ms(pid)
                api.exec_first_output(sandbox_id)
                t3, cpu3 = time.perf_counter(), _cpu_ms(pid)
                if keep:
                    for name, ms in claim_phases.items():
                        phases.setdefault(name, []).append(ms)
                    for name, ms, spent in (
                        ("API claim", t1 - t0, cpu1 - cpu0),
                        ("API first exec", t2 - t1, cpu2 - cpu1),
                        ("API later exec", t3 - t2, cpu3 - cpu2),
                        ("API claim → output", first - t0, cpu2 - cpu0),
                    ):
                        samples[name].append(ms * 1000)
                        cpu[name] += spent
                api.kill(sandbox_id)

                wait_pool_full(client, pid)
                arrived: list[float] = []
                on_stdout = _appender(arrived)
                cpu0 = _cpu_ms(pid)
                started = time.perf_counter()
                sbx = Sandbox.create(template=TEMPLATE, **kw)
                try:
                    sbx.exec(["echo", "hi"], on_stdout=on_stdout)
                    if keep:
                        samples["SDK claim → output"].append((arrived[0] - started) * 1000)
                        cpu["SDK claim → output"] += _cpu_ms(pid) - cpu0
                finally:
                    sbx.kill()
            wait_pool_full(client, pid)
            with Sandbox.create(template=TEMPLATE, **kw) as sbx:
                floor = spawn_floor(sbx, max(100, args.runs * 5))
                echo = echo_floor(sbx, max(100, args.runs * 5))
    print(f"ready pool of {POOL}, {args.runs} rounds (after two warm-up rounds); ms")
    print(f"{'step':28} {'p50':>8} {'p99':>8} {'daemon CPU':>11}")
    print(f"{floor.name[:28]:28} {floor.p50:8.2f} {floor.p99:8.2f}")
    print(f"{echo.name[:28]:28} {echo.p50:8.2f} {echo.p99:8.2f}")
    for name, values in samples.items():
        figure = Figures(name, values)
        print(f"{name:28} {figure.p50:8.2f} {figure.p99:8.2f} {cpu[name] / args.runs:11.2f}")
    print()
    print("the claim's phases (Server-Timing; 'total' is the daemon's wall to the answer's head)")
    for name, values in phases.items():
        figure = Figures(name, values)
        print(f"  {name:26} {figure.p50:8.2f} {figure.p99:8.2f}  (in {len(values)} of {args.runs})")
    print()
    for name in ("API claim → output", "SDK claim → output"):
        p50 = Figures(name, samples[name]).p50
        print(goal_line(f"ready pool, {name}", p50, floor.p50 + 5, "ms", "spawn floor + 5 ms"))
        print(echo_note(p50, floor, echo))
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


if __name__ == "__main__":
    main()
