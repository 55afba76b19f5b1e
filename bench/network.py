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

Set-up is the time from connect() to the end of a small answer on a new connection, p50 over
``--runs``; throughput is one upload and one download of ``--size`` MiB on a kept-alive
connection; each path runs ``--rounds`` times, interleaved with the others, and the medians
are shown. Beside MiB/s it prints CPU seconds per GiB moved over the transfers: the proxy's own
(user = Python, sys = the kernel's work for its two connections) and all of the client's, the
server's and the proxy's together. These hardly move with the host's load, and on two saturated
cores a proxied path's throughput ratio tends to its CPU ratio. ``cpu-wait`` says whether a path
waits for CPUs or for its peers: the share of the transfers' time that the client's and the
server's threads spent runnable without a CPU (``/proc/thread-self/schedstat``), beside the
host's idle share over the same time (``/proc/stat``). Everything lives in namespaces
made here (the lab of tests/integration/network) and is removed at the end.
Usage: ``.venv/bin/python bench/network.py [--runs 200] [--size 256]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVER_PORT = 8080
PROXY_PORT = 18080
SANDBOX_ID = "sb-benchinbound1"
TOKEN = "b" * 64

SERVER = r"""
import socket, sys, threading
address, port = sys.argv[1], int(sys.argv[2])
BLOCK = b"x" * (1 << 20)

def serve(conn):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    pending = b""
    start = open("/proc/thread-self/schedstat").read().split()
    moved = 0
    try:
        while True:
            while b"\r\n\r\n" not in pending:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            head, _, pending = pending.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            moved += length
            left = length - len(pending[:length])
            pending = pending[length:]
            while left:
                got = conn.recv_into(view[: min(left, len(buf))])
                if not got:
                    return
                left -= got
            if path.startswith(b"/download/"):
                size = int(path.rsplit(b"/", 1)[1])
                moved += size
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                while size:
                    part = min(size, len(BLOCK))
                    conn.sendall(BLOCK[:part])
                    size -= part
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    finally:
        conn.close()
        if moved >= 1 << 20:  # a transfer: its thread's seconds on a CPU and waiting for one
            end = open("/proc/thread-self/schedstat").read().split()
            print(*((int(end[i]) - int(start[i])) / 1e9 for i in (0, 1)), flush=True)

listener = socket.create_server((address, port), backlog=256, reuse_port=True)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

CLIENT = r"""
import json, os, socket, sys, time
address, port, host, prefix, token = sys.argv[1:6]
port, runs, size = int(port), int(sys.argv[6]), int(sys.argv[7])
extra = "X-Corral-Token: %s\r\n" % token if token != "-" else ""

def head(method, path, length=None):
    text = "%s %s%s HTTP/1.1\r\nHost: %s\r\n%s" % (method, prefix, path, host, extra)
    if length is not None:
        text += "Content-Length: %d\r\n" % length
    return (text + "\r\n").encode()

def read_answer(sock, buf):
    view = memoryview(buf)
    got = b""
    while b"\r\n\r\n" not in got:
        data = sock.recv(65536)
        assert data, "closed before an answer"
        got += data
    top, _, rest = got.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 200"), top[:200]
    lines = [l for l in top.split(b"\r\n") if l.lower().startswith(b"content-length")]
    length = int(lines[0].split(b":")[1])
    left = length - len(rest)
    while left:
        n = sock.recv_into(view[: min(left, len(buf))])
        assert n, "closed in an answer"
        left -= n

buf = bytearray(1 << 20)
small = []
for _ in range(runs):
    started = time.perf_counter()
    s = socket.create_connection((address, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head("GET", "/small"))
    read_answer(s, buf)
    small.append((time.perf_counter() - started) * 1000)
    s.close()
print("set-ups done", flush=True)  # the bench reads the proxy's CPU time, then says go
sys.stdin.readline()
sched = open("/proc/thread-self/schedstat").read().split()
s = socket.create_connection((address, port), timeout=60)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
block = b"y" * (1 << 20)
started = time.perf_counter()
s.sendall(head("POST", "/upload", size))
for _ in range(size >> 20):
    s.sendall(block)
read_answer(s, buf)
up = time.perf_counter() - started
started = time.perf_counter()
s.sendall(head("GET", "/download/%d" % size))
read_answer(s, buf)
down = time.perf_counter() - started
s.close()
sched = [(int(b) - int(a)) / 1e9
         for a, b in zip(sched[:2], open("/proc/thread-self/schedstat").read().split())]
small.sort()
mib = size / (1 << 20)
own = os.times()  # over the set-ups and the transfers; the set-ups are a small part
print(json.dumps({"setup_ms": small[len(small) // 2], "up": mib / up, "down": mib / down,
                  "client_cpu": own.user + own.system, "client_sched": sched,
                  "seconds": up + down}))
"""

PROXY = r"""
import asyncio, contextlib, sys
sys.path.insert(0, sys.argv[1])
from corral.api.front import front_protocol
from corral.api.inbound import InboundProxy
from corral.service.errors import Forbidden
from corral.service.ports import InboundTarget

class Ports:
    # The service side of the daemon, reduced to one open port of one running sandbox.
    def __init__(self, address, port, token):
        self.address, self.port, self.token = address, port, token
    def check_access(self, sandbox_id, port, token):
        if token != self.token:
            raise Forbidden("wrong token")
    async def resolve_inbound(self, sandbox_id, port):
        return InboundTarget(sandbox_id, self.address, self.port)
    def connection(self, sandbox_id, port):
        return contextlib.nullcontext()

async def main():
    ports = Ports(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    proxy = InboundProxy(ports)  # type: ignore[arg-type]
    front = front_protocol(proxy, asyncio.Protocol, max_head=65536)
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: front(_loop=loop), "127.0.0.1", int(sys.argv[5]))
    print("ready", flush=True)
    await asyncio.Future()

asyncio.run(main())
"""


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


async def client(
    netns: str,
    target: tuple[str, int, str, str, str],
    runs: int,
    size: int,
    cpu: Callable[[], tuple[float, float]],
    server: subprocess.Popen[bytes],
) -> dict:
    """One round on one path: the set-ups, then the transfers; ``user``/``sys`` are ``cpu()``'s
    (the proxy's) growth over the transfers alone, ``all`` the CPU time of the client, the
    server and the proxy together, each in seconds per GiB moved. ``wait`` is the share of the
    transfers' time that the client's and the server's threads spent runnable but without a
    CPU (the mean of the two), ``idle`` the host's idle share of its CPUs over that time."""
    address, port, host, prefix, token = target
    command = ["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT]
    command += [address, str(port), host, prefix, token, str(runs), str(size)]
    process = await asyncio.create_subprocess_exec(
        *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stdin is not None
    said = await process.stdout.readline()
    before, server_before, idle_before = cpu(), sum(_cpu_of(server.pid)), _host_idle()
    process.stdin.write(b"go\n")
    out, err = await process.communicate()
    after, server_after, idle_after = cpu(), sum(_cpu_of(server.pid)), _host_idle()
    if process.returncode != 0 or said.strip() != b"set-ups done":
        raise SystemExit(f"client in {netns} failed: {err.decode()[-600:]}")
    figures: dict = json.loads(out)
    assert server.stdout is not None  # the server's thread says so when the transfer's closed
    server_sched = [float(n) for n in (await asyncio.to_thread(server.stdout.readline)).split()]
    seconds = figures.pop("seconds")
    client_wait = figures.pop("client_sched")[1]
    figures["wait"] = (client_wait + server_sched[1]) / 2 / seconds
    figures["idle"] = (idle_after[0] - idle_before[0]) / (idle_after[1] - idle_before[1])
    gib = 2 * size / (1 << 30)  # one upload and one download
    figures["user"] = (after[0] - before[0]) / gib
    figures["sys"] = (after[1] - before[1]) / gib
    proxy = sum(after) - sum(before)
    figures["all"] = (figures.pop("client_cpu") + server_after - server_before + proxy) / gib
    return figures


async def main(runs: int, size_mib: int, repeats: int, only: list[str]) -> None:
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
            # The lab serves WEB:80 on this loop; a server process takes its place, so every
            # path has the same server.
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
            paths = {
                "plain": (plain_a, ("198.18.1.2", SERVER_PORT, "198.18.1.2", "", "-")),
                "direct": (lab.sbx(0), (WEB, 80, WEB, "", "-")),
                "filtered": (lab.sbx(1), (WEB, 80, "api.example.test", "", "-")),
                "in-slot": (lab.host_ns, (slot_address, SERVER_PORT, slot_address, "", "-")),
                "inbound": (lab.host_ns, ("127.0.0.1", PROXY_PORT, "127.0.0.1", in_port, TOKEN)),
            }
            servers = {"plain": plain_server, "direct": web_server, "filtered": web_server}
            servers |= {"in-slot": sandbox_server, "inbound": sandbox_server}
            paths = {name: paths[name] for name in (["plain", *only] if only else paths)}
            rounds: dict[str, list[dict]] = {name: [] for name in paths}
            # The proxy's CPU seconds per GiB moved (the egress proxy runs in this process,
            # the inbound one in its own), user (Python) and system (the kernel's TCP work):
            # unlike MiB/s, they hardly move with the host's load, and say where the cost is.
            proxy_cpu = {"filtered": _own_cpu, "inbound": lambda: _cpu_of(inbound.pid)}
            for _ in range(repeats):  # interleaved, so a busy moment hits every path alike
                for name, (netns, target) in paths.items():
                    cpu = proxy_cpu.get(name, lambda: (0.0, 0.0))
                    figures = await client(netns, target, runs, size, cpu, servers[name])
                    rounds[name].append(figures)
            for name, measured in rounds.items():
                results[name] = {
                    key: sorted(m[key] for m in measured)[len(measured) // 2]
                    for key in ("setup_ms", "up", "down", "user", "sys", "all", "wait", "idle")
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
        f"{'path':9} {'setup p50 ms':>13} {'x plain':>8} {'up MiB/s':>9} {'plain/path':>11}"
        f" {'down MiB/s':>11} {'plain/path':>11} {'proxy s/GiB usr+sys':>20}"
        f" {'all s/GiB':>10} {'cpu-wait':>9} {'idle':>5}"
    )
    for name, figures in results.items():
        print(
            f"{name:9} {figures['setup_ms']:13.3f} {figures['setup_ms'] / plain['setup_ms']:8.2f}"
            f" {figures['up']:9.0f} {plain['up'] / figures['up']:11.2f}"
            f" {figures['down']:11.0f} {plain['down'] / figures['down']:11.2f}"
            f" {figures['user']:11.2f}+{figures['sys']:.2f} {figures['all']:10.2f}"
            f" {figures['wait']:9.0%} {figures['idle']:5.0%}"
        )

    def goal(text: str, met: bool) -> None:
        print(f"goal {text}: {'met' if met else 'missed'}")

    added = results["filtered"]["setup_ms"] - results["direct"]["setup_ms"]
    goal(f"host-name filtering adds {added:.3f} ms to set-up (< 1 ms)", added < 1.0)
    for name, base in (("filtered", "direct"), ("inbound", "in-slot")):
        cpu = results[name]["all"] / results[base]["all"]
        print(f"{name} takes {cpu:.2f}x the CPU time per GiB of {base} (client, server, proxy)")
        for way in ("up", "down"):
            ratio = results[base][way] / results[name][way]
            goal(f"{name} {way}load within 1.5x of {base}: {ratio:.2f}x", ratio <= 1.5)
            ratio = plain[way] / results[name][way]
            goal(f"{name} {way}load within 1.5x of plain: {ratio:.2f}x", ratio <= 1.5)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=256, help="transfer size in MiB")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per path")
    parser.add_argument("--only", nargs="*", default=[], help="these paths (plain is always run)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.size, args.rounds, args.only))
