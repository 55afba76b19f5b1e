"""Network cost: connection set-up and throughput, egress (direct, host-name filtered) and inbound
(through the daemon's inbound proxy), each beside the same transfer between two plain network
namespaces, all measured in the same run.

Paths (every server and client is its own process, run with ``ip netns exec``):

- ``plain``: two bare namespaces joined by one veth (the baseline);
- ``direct``: a sandbox namespace whose policy allows the server by address (the slot namespace
  forwards, the lab's host namespace masquerades);
- ``filtered``: the same, allowed only by host name, so TCP 80 goes through the egress proxy
  (``Host`` checked against the resolver's answers, then spliced);
- ``in-slot``: the host side reaching a server in a sandbox namespace through its slot (DNAT), as
  the daemon does for a sandbox's port: the path under the inbound proxy;
- ``inbound``: a client on the host side through the inbound proxy (``api/front.py`` +
  ``api/inbound/``, the daemon's own code, with a port token) to that server.

Those are namespaces with corral's own rules and proxies but no gVisor: the stricter measure
of what the proxies cost, as a namespace's TCP is cheap. Then the paths a user sees (left out
with ``--no-sandboxes``): gVisor sandboxes of a private daemon (``bench/_harness.py``) whose
internet egress leads to a lab of its own (``tests/e2e/hostlab.py``) where the same server
answers at ``bulk.bench.test``:

- ``sbx-direct``: the client in a sandbox allowed that address and port (forwarded);
- ``sbx-filtered``: the client in a sandbox allowed only the name (the daemon's egress proxy);
- ``sbx-in-slot``: the server in a sandbox, the client on the host reaching its slot address;
- ``sbx-inbound``: the same through the daemon's inbound proxy with the port's token.

Set-up is the time from connect() to the end of a small answer on a new connection, p50 over
``--runs``; throughput is one upload and one download of ``--size`` MiB on a kept-alive
connection; each path runs ``--rounds`` times, interleaved with the others (every other round
in the reverse order), and the medians are shown. Beside MiB/s it prints CPU seconds per GiB
moved over the transfers: the proxy's own
(user = Python, sys = the kernel's work for its two connections) and all of the client's, the
server's and the proxy's together. These hardly move with the host's load, and on two saturated
cores a proxied path's throughput ratio tends to its CPU ratio. ``cpu-wait`` says whether a path
waits for CPUs or for its peers: the share of the transfers' time that the client's and the
server's threads spent runnable without a CPU (``/proc/thread-self/schedstat``), beside the
host's idle share over the same time (``/proc/stat``). Everything lives in namespaces
made here (the lab of tests/integration/network) and is removed at the end.
For a path with a sandbox, ``all`` is the whole host's busy time (gVisor's processes are not
singled out), so other work on the host counts in it; ``host`` is that figure for every path.
Usage: ``.venv/bin/python bench/network.py [--runs 200] [--size 256] [--no-sandboxes]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _network_scripts import CLIENT, PROXY, SERVER

REPO = Path(__file__).resolve().parent.parent
SERVER_PORT = 8080
PROXY_PORT = 18080
SANDBOX_ID = "sb-benchinbound1"
BULK_NAME = "bulk.bench.test"
TOKEN = "b" * 64


class Processes:
    """Background processes started here, each ended by its own pid."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, netns: str, script: str, *args: str) -> subprocess.Popen[bytes]:
        command = ["ip", "netns", "exec", netns, sys.executable, "-c", script, *args]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != b"ready":
            assert process.stderr is not None
            raise SystemExit(f"{args} in {netns} did not start: {process.stderr.read()[-600:]!r}")
        return process

    def stop(self) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)


def _own_cpu() -> tuple[float, float]:
    """This process's user and system CPU seconds."""
    times = os.times()
    return times.user, times.system


def _host_idle() -> tuple[int, int]:
    """The host's idle and total CPU time since boot, in ticks (``/proc/stat``)."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return ticks[3] + ticks[4], sum(ticks)


def _cpu_of(pid: int) -> tuple[float, float]:
    """Process ``pid``'s user and system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


class Meter:
    """The CPU seconds of one transfer's parties, read before and after it: ``proxy`` (the
    proxy's user and system seconds), the server's (a process here, or none for a server in a
    gVisor sandbox, whose host processes are not ours to list) and the host's busy and idle
    ticks (``/proc/stat``)."""

    def __init__(
        self, proxy: Callable[[], tuple[float, float]], server: subprocess.Popen[bytes] | None
    ) -> None:
        self.proxy, self.server = proxy, server
        self.marks: list[tuple[tuple[float, float], float, tuple[int, int]]] = []

    def mark(self) -> None:
        server = sum(_cpu_of(self.server.pid)) if self.server is not None else 0.0
        self.marks.append((self.proxy(), server, _host_idle()))

    async def server_sched(self) -> list[float]:
        """The server thread's (on-CPU, waiting) seconds of the transfer, which it prints when
        the transfer's connection closes; zeros for a server in a sandbox."""
        if self.server is None:
            return [0.0, 0.0]
        assert self.server.stdout is not None
        return [float(n) for n in (await asyncio.to_thread(self.server.stdout.readline)).split()]


Runner = Callable[[list[str], Meter], Awaitable[dict]]


def in_netns(netns: str) -> Runner:
    """Run the client as a process in ``netns`` (this one when empty): it makes its set-ups,
    says so, and waits for a go-ahead, so that the meter reads only the transfers."""

    async def run(args: list[str], meter: Meter) -> dict:
        command = ["ip", "netns", "exec", netns] if netns else []
        command += [sys.executable, "-c", CLIENT, *args]
        process = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdout is not None and process.stdin is not None
        said = await process.stdout.readline()
        meter.mark()
        process.stdin.write(b"go\n")
        out, err = await process.communicate()
        meter.mark()
        if process.returncode != 0 or said.strip() != b"set-ups done":
            raise SystemExit(f"client in {netns} failed: {err.decode()[-600:]}")
        figures: dict = json.loads(out)
        return figures

    return run


def in_sandbox(sbx: Any) -> Runner:
    """Run the client in a corral sandbox (``AsyncSandbox``), with the image's python3: one
    exec for the set-ups, another for the transfers, which the meter reads around (an exec's
    own cost, ~40 ms, is noise beside hundreds of MiB)."""

    async def run(args: list[str], meter: Meter) -> dict:
        async def client(*args: str) -> dict:
            result = await sbx.exec(["python3", "-c", CLIENT, *args, "none"], timeout=900)
            if result.exit_code != 0:
                raise SystemExit(f"client in sandbox {sbx.id} failed: {result.stderr[-600:]}")
            figures: dict = json.loads(result.stdout)
            return figures

        *target, runs, size = args
        setups = await client(*target, runs, "0")
        meter.mark()
        figures = await client(*target, "0", size)
        meter.mark()
        figures["setup_ms"] = setups["setup_ms"]
        figures["client_cpu"] = None  # the sandbox's own clock, not the host's CPU time
        return figures

    return run


async def client(
    runner: Runner,
    target: tuple[str, int, str, str, str],
    runs: int,
    size: int,
    meter: Meter,
) -> dict:
    """One round on one path: the set-ups, then the transfers; ``user``/``sys`` are the
    proxy's growth over the transfers alone, ``all`` the CPU time of the client, the server and
    the proxy together (for a path with a sandbox, whose processes we cannot single out: the
    whole host's busy time, which counts whatever else runs), ``host`` the whole host's busy
    time, each in seconds per GiB moved. ``wait`` is the share of the transfers' time that the
    client's and the server's threads spent runnable but without a CPU (the mean of the two;
    0 for a party in gVisor, which does not say), ``idle`` the host's idle share of its CPUs
    over that time."""
    address, port, host, prefix, token = target
    args = [address, str(port), host, prefix, token, str(runs), str(size)]
    figures = await runner(args, meter)
    (before, server_before, idle_before), (after, server_after, idle_after) = meter.marks
    meter.marks.clear()
    server_sched = await meter.server_sched()
    seconds = figures.pop("seconds")
    client_wait = figures.pop("client_sched")[1]
    figures["wait"] = (client_wait + server_sched[1]) / 2 / seconds
    idle, total = idle_after[0] - idle_before[0], idle_after[1] - idle_before[1]
    figures["idle"] = idle / total
    gib = 2 * size / (1 << 30)  # one upload and one download
    figures["user"] = (after[0] - before[0]) / gib
    figures["sys"] = (after[1] - before[1]) / gib
    figures["host"] = (total - idle) / os.sysconf("SC_CLK_TCK") / gib
    proxy = sum(after) - sum(before)
    client_cpu = figures.pop("client_cpu")
    if meter.server is None or client_cpu is None:  # a party in gVisor
        figures["all"] = figures["host"]
    else:
        figures["all"] = (client_cpu + server_after - server_before + proxy) / gib
    return figures


async def sandbox_paths(
    stack: contextlib.AsyncExitStack, processes: Processes, work: Path
) -> dict[str, tuple[Runner, tuple[str, int, str, str, str], Meter]]:
    """The paths a user sees: gVisor sandboxes of a private daemon (bench/_harness.py) whose
    internet egress leads to a lab of its own (tests/e2e/hostlab.py) where the same server
    answers at BULK (a name of the lab's DNS); a sandbox allowed BULK:80 by address
    (``sbx-direct``), one allowed only the name (``sbx-filtered``: the daemon's egress proxy),
    and one serving on :8080, reached from the host through its slot (``sbx-in-slot``) and
    through the daemon's inbound proxy with the port's token (``sbx-inbound``)."""
    import ipaddress
    import sqlite3

    sys.path.append(str(REPO / "bench"))  # last, so that the standard library comes first
    from _harness import free_subnet, private_daemon
    from tests.e2e.hostlab import daemon_env, host_lab, random_net

    from corral import AsyncSandbox

    net = random_net()
    bulk = f"{net}.4"
    lab = stack.enter_context(host_lab(work, net, {BULK_NAME: bulk}))
    subprocess.run(
        ["ip", "-n", lab.netns, "addr", "add", f"{bulk}/32", "dev", "lo"], check=True
    )  # removed with the lab's namespace
    server = processes.start(lab.netns, SERVER, bulk, "80")
    subnet = await asyncio.to_thread(free_subnet)  # pyroute2 runs a loop of its own
    settings = daemon_env(lab, "internet,airgapped") | {"CORRAL_NETWORK_SUBNET": subnet}
    # In a thread: it looks for a free subnet with pyroute2, which runs an event loop of its own.
    daemon = await asyncio.to_thread(stack.enter_context, private_daemon(settings))
    login = {"url": daemon.url, "api_key": daemon.key}

    async def sandbox(allow: list[str]) -> Any:
        made = await AsyncSandbox.create(network="airgapped", allow=allow, **login)
        stack.push_async_callback(made.kill)
        return made

    direct = await sandbox([f"{bulk}:80"])
    filtered = await sandbox([BULK_NAME])
    serving = await sandbox([])
    await serving.files.write("/tmp/server.py", SERVER.encode())
    await serving.exec_background(["python3", "/tmp/server.py", "0.0.0.0", str(SERVER_PORT)])
    with sqlite3.connect(f"file:{daemon.data_dir / 'data' / 'corral.db'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT slot_index FROM sandboxes WHERE id = ?", (serving.id,)).fetchone()
    slot_address = str(ipaddress.IPv4Network(subnet).network_address + 4 * row[0] + 2)
    for _ in range(200):  # the server in the sandbox starts listening (python3 in gVisor)
        with contextlib.suppress(OSError), socket.create_connection((slot_address, SERVER_PORT)):
            break
        await asyncio.sleep(0.05)
    port = await serving.ports.open(SERVER_PORT)
    host, daemon_port = daemon.url.removeprefix("http://").split(":")
    in_port = f"/sandboxes/{serving.id}/ports/{SERVER_PORT}"
    daemon_cpu = lambda: _cpu_of(daemon.process.pid)  # noqa: E731 (both proxies run in it)
    nothing = lambda: (0.0, 0.0)  # noqa: E731
    return {
        "sbx-direct": (in_sandbox(direct), (bulk, 80, bulk, "", "-"), Meter(nothing, server)),
        "sbx-filtered": (
            in_sandbox(filtered),
            (BULK_NAME, 80, BULK_NAME, "", "-"),
            Meter(daemon_cpu, server),
        ),
        "sbx-in-slot": (
            in_netns(""),
            (slot_address, SERVER_PORT, slot_address, "", "-"),
            Meter(nothing, None),
        ),
        "sbx-inbound": (
            in_netns(""),
            (host, int(daemon_port), host, in_port, port.token or "-"),
            Meter(daemon_cpu, None),
        ),
    }


async def main(runs: int, size_mib: int, repeats: int, only: list[str], sandboxes: bool) -> None:
    # bench/ holds a secrets.py, which would shadow the standard library's for the lab.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "src"))
    from tests.integration.network.egress_lab import WEB, Lab, new_prefix, open_fd, sweep

    from corral.network.namespaces import (
        add_veth,
        ensure_address,
        open_ipr,
        run_in_netns,
        run_in_new_netns,
        set_up,
    )
    from corral.network.policy import EgressPolicy

    prefix = new_prefix()
    plain_a, plain_b = f"{prefix}-pa", f"{prefix}-pb"
    processes = Processes()
    size = size_mib << 20
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(prefix, Path(tmp))
        try:
            async with contextlib.AsyncExitStack() as stack:
                await lab.build(slot_count=3)
                await lab.attach(0, EgressPolicy.build("airgapped", [f"{WEB}:80"]))
                await lab.attach(1, EgressPolicy.build("airgapped", ["api.example.test"]))
                await lab.attach(2, EgressPolicy.build("airgapped"))

                def wire_plain() -> None:
                    run_in_new_netns(plain_b, lambda: None)
                    fd = open_fd(plain_b)

                    def inside_a() -> None:
                        with open_ipr("plain a") as ipr:
                            set_up(ipr, "lo")
                            add_veth(ipr, "pa0", "pb0", fd)
                            ensure_address(ipr, "pa0", "198.18.1.1", 30)

                    run_in_new_netns(plain_a, inside_a)
                    os.close(fd)

                    def inside_b() -> None:
                        with open_ipr("plain b") as ipr:
                            set_up(ipr, "lo")
                            set_up(ipr, "pb0")
                            ensure_address(ipr, "pb0", "198.18.1.2", 30)

                    run_in_netns(plain_b, inside_b)

                await asyncio.to_thread(wire_plain)
                # The lab serves WEB:80 on this loop; a server process takes its place, so
                # every path has the same server.
                for server in lab.servers:
                    if isinstance(server, asyncio.Server) and any(
                        s.getsockname() == (WEB, 80) for s in server.sockets
                    ):
                        server.close()
                slot_address = lab.plan.layout(2).slot_address
                plain_server = processes.start(plain_b, SERVER, "198.18.1.2", str(SERVER_PORT))
                web_server = processes.start(lab.inet_ns, SERVER, WEB, "80")
                sandbox_server = processes.start(lab.sbx(2), SERVER, "0.0.0.0", str(SERVER_PORT))
                inbound = processes.start(
                    lab.host_ns, PROXY, str(REPO / "src"), slot_address, str(SERVER_PORT), TOKEN,
                    str(PROXY_PORT),
                )  # fmt: skip
                assert (await lab.dig(1, "api.example.test"))[1] == [WEB]

                in_port = f"/sandboxes/{SANDBOX_ID}/ports/{SERVER_PORT}"
                # The proxy's CPU seconds per GiB moved (the egress proxy runs in this process,
                # the inbound one in its own), user (Python) and system (the kernel's TCP
                # work): unlike MiB/s, they hardly move with the host's load, and say where the
                # cost is.
                none = lambda: (0.0, 0.0)  # noqa: E731
                inbound_cpu = lambda: _cpu_of(inbound.pid)  # noqa: E731
                paths = {
                    "plain": (
                        in_netns(plain_a),
                        ("198.18.1.2", SERVER_PORT, "198.18.1.2", "", "-"),
                        Meter(none, plain_server),
                    ),
                    "direct": (
                        in_netns(lab.sbx(0)),
                        (WEB, 80, WEB, "", "-"),
                        Meter(none, web_server),
                    ),
                    "filtered": (
                        in_netns(lab.sbx(1)),
                        (WEB, 80, "api.example.test", "", "-"),
                        Meter(_own_cpu, web_server),
                    ),
                    "in-slot": (
                        in_netns(lab.host_ns),
                        (slot_address, SERVER_PORT, slot_address, "", "-"),
                        Meter(none, sandbox_server),
                    ),
                    "inbound": (
                        in_netns(lab.host_ns),
                        ("127.0.0.1", PROXY_PORT, "127.0.0.1", in_port, TOKEN),
                        Meter(inbound_cpu, sandbox_server),
                    ),
                }
                if sandboxes:
                    paths |= await sandbox_paths(stack, processes, Path(tmp))
                paths = {name: paths[name] for name in (["plain", *only] if only else paths)}
                rounds: dict[str, list[dict]] = {name: [] for name in paths}
                # Interleaved, so a busy moment hits every path alike; every other round in the
                # reverse order, as a transfer leaves work behind (a gVisor sandbox's own clean-up
                # after hundreds of MiB) that slows the path after it.
                for round_ in range(repeats):
                    order = list(paths.items())
                    for name, (runner, target, meter) in order[:: -1 if round_ % 2 else 1]:
                        figures = await client(runner, target, runs, size, meter)
                        rounds[name].append(figures)
                keys = ("setup_ms", "up", "down", "user", "sys", "all", "host", "wait", "idle")
                for name, measured in rounds.items():
                    results[name] = {
                        key: sorted(m[key] for m in measured)[len(measured) // 2] for key in keys
                    }
        finally:
            processes.stop()
            await lab.close()
            sweep(prefix)

    load = os.getloadavg()[0]
    plain = results["plain"]
    if only:
        for name, figures in results.items():
            print(name, figures)
        return
    print(f"runs={runs} transfer={size_mib} MiB rounds={repeats} (medians) load={load:.1f}")
    print(
        f"{'path':12} {'setup p50 ms':>13} {'x plain':>8} {'up MiB/s':>9} {'plain/path':>11}"
        f" {'down MiB/s':>11} {'plain/path':>11} {'proxy s/GiB usr+sys':>20}"
        f" {'all s/GiB':>10} {'host s/GiB':>11} {'cpu-wait':>9} {'idle':>5}"
    )
    for name, figures in results.items():
        print(
            f"{name:12} {figures['setup_ms']:13.3f} {figures['setup_ms'] / plain['setup_ms']:8.2f}"
            f" {figures['up']:9.0f} {plain['up'] / figures['up']:11.2f}"
            f" {figures['down']:11.0f} {plain['down'] / figures['down']:11.2f}"
            f" {figures['user']:11.2f}+{figures['sys']:.2f} {figures['all']:10.2f}"
            f" {figures['host']:11.2f} {figures['wait']:9.0%} {figures['idle']:5.0%}"
        )

    def goal(text: str, met: bool) -> None:
        print(f"goal {text}: {'met' if met else 'missed'}")

    pairs = [("filtered", "direct"), ("inbound", "in-slot")]
    if sandboxes:
        pairs += [("sbx-filtered", "sbx-direct"), ("sbx-inbound", "sbx-in-slot")]
    for name, base in pairs:
        if name.endswith("filtered"):
            added = results[name]["setup_ms"] - results[base]["setup_ms"]
            goal(f"{name} adds {added:.3f} ms to set-up over {base} (< 1 ms)", added < 1.0)
    for name, base in pairs:
        cpu = results[name]["all"] / results[base]["all"]
        print(f"{name} takes {cpu:.2f}x the CPU time per GiB of {base} (see 'all')")
        for way in ("up", "down"):
            ratio = results[base][way] / results[name][way]
            goal(f"{name} {way}load within 1.5x of {base}: {ratio:.2f}x", ratio <= 1.5)
            if not name.startswith("sbx-"):
                ratio = plain[way] / results[name][way]
                goal(f"{name} {way}load within 1.5x of plain: {ratio:.2f}x", ratio <= 1.5)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=256, help="transfer size in MiB")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per path")
    parser.add_argument("--only", nargs="*", default=[], help="these paths (plain is always run)")
    parser.add_argument(
        "--no-sandboxes",
        action="store_true",
        help="the namespace paths only (no daemon, no gVisor)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.size, args.rounds, args.only, not args.no_sandboxes))
