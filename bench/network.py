"""Egress cost: connection set-up and throughput through a slot, direct and through the proxy.

Three paths carry the same HTTP exchange, measured in the same run:

- ``plain``: two bare network namespaces joined by one veth (the baseline);
- ``direct``: a sandbox namespace whose policy allows the server by address (slot ns forwards,
  the host namespace masquerades);
- ``filtered``: the same sandbox allowed only by host name, so TCP 80 goes through the egress
  proxy (Host check against the resolver's answers, then splicing).

Set-up is the time from connect() to the first byte of a small response (the proxy connects
upstream only after it has read the request head), p50 over ``--runs``; throughput is one upload
of ``--size`` MiB. The client runs as its own process inside the sandbox namespace (``ip netns
exec``); servers, resolver and proxy run on this process's event loop. Everything lives in
namespaces made here (the lab of tests/integration/network) and is removed at the end.
Usage: ``.venv/bin/python bench/network.py [--runs 200] [--size 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = r"""
import json, socket, sys, time
address, host = sys.argv[1], sys.argv[3]
port, runs, size = int(sys.argv[2]), int(sys.argv[4]), int(sys.argv[5])
def exchange(body):
    s = socket.create_connection((address, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n" % (host, len(body))
    s.sendall(head.encode())
    view = memoryview(body)
    for start in range(0, len(body), 1 << 20):
        s.sendall(view[start:start + (1 << 20)])
    data = s.recv(4096)
    s.close()
    return data
small = []
for _ in range(runs):
    started = time.perf_counter()
    assert exchange(b"").startswith(b"HTTP/1.1 200")
    small.append((time.perf_counter() - started) * 1000)
body = b"x" * size
started = time.perf_counter()
assert exchange(body).startswith(b"HTTP/1.1 200")
elapsed = time.perf_counter() - started
small.sort()
print(json.dumps({"setup_ms": small[len(small) // 2], "mib_s": size / elapsed / (1 << 20)}))
"""


async def main(runs: int, size_mib: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
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
    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(prefix, Path(tmp))
        try:
            await lab.build(slot_count=2)
            await lab.attach(0, EgressPolicy.build("airgapped", [f"{WEB}:80"]))
            await lab.attach(1, EgressPolicy.build("airgapped", ["api.example.test"]))

            def wire_plain() -> None:
                run_in_new_netns(plain_b, lambda: None)
                fd = open_fd(plain_b)

                def inside_a() -> None:
                    with open_ipr("plain a") as ipr:
                        set_up(ipr, "lo")
                        add_veth(ipr, "pa0", "pb0", fd)
                        ensure_address(ipr, "pa0", "198.18.1.1", 30)

                run_in_new_netns(plain_a, inside_a)

                def inside_b() -> None:
                    with open_ipr("plain b") as ipr:
                        set_up(ipr, "lo")
                        set_up(ipr, "pb0")
                        ensure_address(ipr, "pb0", "198.18.1.2", 30)

                run_in_netns(plain_b, inside_b)

            await asyncio.to_thread(wire_plain)

            def bound() -> socket.socket:
                sock = socket.socket()
                sock.bind(("198.18.1.2", 80))
                sock.listen(64)
                sock.setblocking(False)
                return sock

            sock = await asyncio.to_thread(run_in_netns, plain_b, bound)
            lab.servers.append(await asyncio.start_server(lab._http, sock=sock))
            assert (await lab.dig(1, "api.example.test"))[1] == [WEB]

            size = size_mib << 20
            paths = {
                "plain": (plain_a, "198.18.1.2", "198.18.1.2"),
                "direct": (lab.sbx(0), WEB, WEB),
                "filtered": (lab.sbx(1), WEB, "api.example.test"),
            }
            results = {}
            for name, (netns, address, host) in paths.items():
                command = ["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT]
                command += [address, "80", host, str(runs), str(size)]
                process = await asyncio.create_subprocess_exec(
                    *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
                out, err = await process.communicate()
                if process.returncode != 0:
                    raise SystemExit(f"client on the {name} path failed: {err.decode()[-400:]}")
                results[name] = json.loads(out)
        finally:
            await lab.close()
            sweep(prefix)

    plain = results["plain"]
    print(f"runs={runs} upload={size_mib} MiB")
    print(f"{'path':10} {'setup p50 ms':>13} {'x plain':>8} {'MiB/s':>9} {'plain/path':>11}")
    for name, figures in results.items():
        print(
            f"{name:10} {figures['setup_ms']:13.3f} {figures['setup_ms'] / plain['setup_ms']:8.2f}"
            f" {figures['mib_s']:9.1f} {plain['mib_s'] / figures['mib_s']:11.2f}"
        )
    added = results["filtered"]["setup_ms"] - results["direct"]["setup_ms"]
    slower = results["direct"]["mib_s"] / results["filtered"]["mib_s"]
    print(f"host-name filtering adds {added:.3f} ms to set-up (goal < 1 ms)")
    print(f"filtered throughput: direct is {slower:.2f}x of it (goal within 1.5x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=64, help="upload size in MiB")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.size))
