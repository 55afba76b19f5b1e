"""Where the ms of one exec round trip go, layer by layer, in one run on one sandbox.

    .venv/bin/python bench/exec_breakdown.py [--runs 60]

The same command (`true`) is run through each layer, the samples taken in turn (A B C D E F, A B
C D E F, ...) so load from elsewhere weighs on all alike:

    in-sandbox floor      posix_spawn + wait of /bin/true inside the sandbox (the goal's floor)
    agent direct          one `POST /processes?stream=true` to the agent over a kept-alive
                          http.client connection from this process, read to the exit event:
                          the agent's part plus the least a host client can add
    agent direct, idle    the same after the sandbox sat 50 ms without a call (untimed): a
                          gVisor sandbox answers its first call after a pause far slower than
                          one right after another (a pooled sandbox's first exec, a user's
                          command after some thought); the difference is printed below
    API GET (no agent)    `GET /v1/sandboxes/ID` to the daemon over a kept-alive connection:
                          the daemon's front, auth, routing and one record read
    API exec, kept-alive  `POST /v1/sandboxes/ID/exec` the same way: agent direct + the daemon
    SDK run_exec          ``corral.sdk.plainhttp.run_exec``, a new connection each (the CLI's path)
    SDK Sandbox.exec      the sync SDK (its loop thread; to a plain-http daemon its own HTTP/1.1
                          client, `corral.sdk._http1`), one kept-alive client

The daemon's CPU time per call (all its threads, from /proc) is printed beside each layer: it
is what the host spends whatever the load, where wall times on a busy machine are mostly waiting.
So is the sandbox's (its cgroup: gVisor's sentry, gofer and the application's stubs), which
carries the agent's and the spawn's own work; the floor's is one spawn of the in-sandbox loop.
The host's share is `API exec` minus `agent direct`; the goal (issue 14) is the SDK's round trip
at most the floor + 3 ms. The agent's key and address are read as the daemon keeps them (its
data dir's ``agent-keys/``, the slot's address from the record's slot index and the daemon's
subnet): this bench talks to the agent exactly as the daemon's client does, nothing else.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, private_daemon
from _measure import goal_line, sandbox_cpu_meter
from floor import spawn_floor

from corral import Sandbox
from corral.agent import AGENT_PORT
from corral.sdk.plainhttp import run_exec


def _daemon_subnet(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for item in environ:
        if item.startswith(b"CORRAL_NETWORK_SUBNET="):
            return item.split(b"=", 1)[1].decode()
    raise RuntimeError(f"daemon {pid} has no CORRAL_NETWORK_SUBNET")


def _agent_address(data: Path, subnet: str, sandbox_id: str) -> str:
    with sqlite3.connect(data / "corral.db") as db:
        row = db.execute("SELECT slot_index FROM sandboxes WHERE id = ?", (sandbox_id,)).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError(f"sandbox {sandbox_id} has no slot in the daemon's store")
    return str(ipaddress.ip_network(subnet).network_address + 4 * int(row[0]) + 2)


def _read_to_exit(response: http.client.HTTPResponse) -> None:
    while True:
        line = response.readline()
        if not line:
            raise RuntimeError("the stream ended before the exit event")
        if line.strip() and json.loads(line).get("type") == "exit":
            response.read()  # the chunked body's end, so the connection can be reused
            return


class KeptAlive:
    """One kept-alive http.client connection that times a request to its answer's end."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=30)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def timed(self, method: str, path: str, body: object | None, stream: bool) -> float:
        payload = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        self.connection.request(method, path, payload, self.headers)
        response = self.connection.getresponse()
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: HTTP {response.status}: {response.read()!r}")
        if stream:
            _read_to_exit(response)
        else:
            response.read()
        return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    with private_daemon() as daemon, Sandbox.create(url=daemon.url, api_key=daemon.key) as sbx:
        data = daemon.data_dir / "data"
        agent_key = (data / "agent-keys" / sbx.id).read_text().strip()
        address = _agent_address(data, _daemon_subnet(daemon.process.pid), sbx.id)
        api_host, api_port = daemon.url.removeprefix("http://").rsplit(":", 1)
        agent = KeptAlive(address, AGENT_PORT, agent_key)
        api = KeptAlive(api_host, int(api_port), daemon.key)
        true_spec = {"cmd": ["true"]}
        path = f"/v1/sandboxes/{sbx.id}"
        env = {"CORRAL_URL": daemon.url, "CORRAL_API_KEY": daemon.key}
        layers: dict[str, Callable[[], float]] = {
            "agent direct (kept-alive)": lambda: agent.timed(
                "POST", "/processes?stream=true", true_spec, stream=True
            ),
            "agent direct, after 50 ms idle": lambda: _after_pause(
                0.05, lambda: agent.timed("POST", "/processes?stream=true", true_spec, stream=True)
            ),
            "API GET sandbox (no agent)": lambda: api.timed("GET", path, None, stream=False),
            "API exec (kept-alive)": lambda: api.timed(
                "POST", f"{path}/exec", true_spec, stream=True
            ),
            "SDK run_exec (new connection)": lambda: _timed(
                lambda: run_exec(sbx.id, ["true"], url=env["CORRAL_URL"], api_key=daemon.key)
            ),
            "SDK Sandbox.exec": lambda: _timed(lambda: sbx.exec(["true"])),
        }
        samples: dict[str, list[float]] = {name: [] for name in layers}
        daemon_cpu = dict.fromkeys(layers, 0.0)
        sandbox_cpu = dict.fromkeys(layers, 0.0)
        meter = sandbox_cpu_meter(sbx.id) or (lambda: 0.0)
        for i in range(args.runs + 3):  # three warm-up rounds
            for name, layer in layers.items():
                cpu_before, sandbox_before = _cpu_ms(daemon.process.pid), meter()
                ms = layer()
                if i >= 3:
                    samples[name].append(ms)
                    daemon_cpu[name] += _cpu_ms(daemon.process.pid) - cpu_before
                    sandbox_cpu[name] += meter() - sandbox_before
        floor_runs = max(100, args.runs * 2)
        sandbox_before = meter()
        floor = spawn_floor(sbx, floor_runs)
        floor_cpu = (meter() - sandbox_before) / (floor_runs + 5)  # with the loop's start
    figures = {name: Figures(name, values) for name, values in samples.items()}
    direct = figures["agent direct (kept-alive)"].p50
    print(f"exec of `true`, {args.runs} rounds taken in turn; ms")
    head = f"{'p50 - agent direct':>19} {'daemon CPU':>11} {'sandbox CPU':>12}"
    print(f"{'layer':34} {'p50':>8} {'p99':>8} {head}")
    print(f"{floor.name[:34]:34} {floor.p50:8.2f} {floor.p99:8.2f} {'':31} {floor_cpu:12.2f}")
    for name, figure in figures.items():
        extra = figure.p50 - direct
        cpu, inside = daemon_cpu[name] / args.runs, sandbox_cpu[name] / args.runs
        print(
            f"{figure.name:34} {figure.p50:8.2f} {figure.p99:8.2f} {extra:19.2f} {cpu:11.2f}"
            f" {inside:12.2f}"
        )
    sdk = figures["SDK run_exec (new connection)"].p50
    print()
    print(f"agent's share above the floor: {direct - floor.p50:6.2f} ms")
    host = figures["API exec (kept-alive)"].p50 - direct
    print(f"host's share (API exec - agent direct): {host:6.2f} ms")
    idle = figures["agent direct, after 50 ms idle"].p50 - direct
    print(f"a 50 ms pause before the agent call adds: {idle:6.2f} ms (no daemon on that path)")
    print(goal_line("exec round trip (SDK)", sdk, floor.p50 + 3, "ms", "spawn floor + 3 ms"))
    sync_sdk = figures["SDK Sandbox.exec"].p50
    print(
        goal_line(
            "exec round trip (Sandbox.exec)", sync_sdk, floor.p50 + 3, "ms", "spawn floor + 3 ms"
        )
    )
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


def _cpu_ms(pid: int) -> float:
    """CPU time (user + system, all threads) the process has used, in ms (clock-tick grain:
    summed over many calls, the mean per call is exact enough)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _after_pause(seconds: float, fn: Callable[[], float]) -> float:
    """``fn()``'s own figure, called after ``seconds`` without a call (the pause untimed)."""
    time.sleep(seconds)
    return fn()


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
