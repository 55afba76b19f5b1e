"""How late a gVisor sandbox answers a packet after sitting idle, by its CPU count; raw runsc.

    .venv/bin/python bench/idle_wakeup.py [--runs 40] [--pauses 0,10,50] [--spawn]
                                          [--runsc-flag=--gvisor-gro ...]

A one-byte TCP ping-pong (TCP_NODELAY on both ends, one kept connection) from the root network
namespace, each ping after a pause (exactly that idle: an untimed ping goes right before it),
to a python3 echo loop:

    plain netns          in a network namespace behind a veth: the host's own cost
    runsc, 1-CPU cpuset  a raw `runsc run` container (systrap, --network=sandbox and the flags
                         corral uses) with a 1-core quota and a cpuset of one host CPU: runsc
                         then boots the sentry with --cpu-num=1, which is also its GOMAXPROCS
    runsc, 2-CPU cpuset  the same with a cpuset of two host CPUs (--cpu-num=2); the quota is
                         still one core

``--spawn``: the echo loop posix_spawns /bin/true and waits for it before each answer, and
prints that time as it measured it inside. Nothing of corral is involved (no agent, no daemon,
no slot): what this shows is gVisor's own behaviour. Targets and pauses are taken in turn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import BASE_ROOTFS, Figures, percentile

PORT = 7777
# Each target's veth gets a /30 of this /24, which no daemon here uses (theirs are 10.1xx.*).
SUBNET = "10.254.77"
CGROUP_PARENT = "corral-bench-idle"
ECHO = f"""
import os, socket, sys, time
spawn = sys.argv[1] == "spawn"
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT}))
s.listen(1)
while True:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(64)
        if not d:
            break
        if spawn:
            t = time.perf_counter()
            os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], os.environ), 0)
            d = b"%.3f" % ((time.perf_counter() - t) * 1000)
        c.sendall(d)
    c.close()
"""
NETNS_WRAPPER = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    'mount -t tmpfs none /proc/sys/net && exec "$0" "$@"',
]


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextlib.contextmanager
def netns(tag: str, index: int) -> Iterator[tuple[str, str]]:
    """A fresh netns whose eth0 is veth-paired to the host; yields (its name, eth0's address)."""
    ns, host_if = f"cbi-{os.getpid()}-{tag}", f"cbi{os.getpid()}{tag}"[:15]
    host_ip, inner_ip = f"{SUBNET}.{4 * index + 1}", f"{SUBNET}.{4 * index + 2}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        for cmd in (
            ["addr", "add", f"{inner_ip}/30", "dev", "eth0"],
            ["link", "set", "eth0", "up"],
            ["link", "set", "lo", "up"],
            ["route", "add", "default", "via", host_ip],
        ):
            sh("ip", "-n", ns, *cmd)
        yield ns, inner_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextlib.contextmanager
def plain_server(ns: str, mode: str) -> Iterator[None]:
    proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", ECHO, mode])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def runsc_server(ns: str, cpuset: str, mode: str, flags: list[str]) -> Iterator[str]:
    """A raw runsc container with a 1-core quota on ``cpuset`` running the echo loop in netns
    ``ns``; yields its container id."""
    work = Path(tempfile.mkdtemp(prefix="corral-bench-idle-"))
    cid = f"cbi-{os.getpid()}-{ns.rsplit('-', 1)[1]}"
    (work / "root").mkdir()
    spec = {
        "ociVersion": "1.0.0",
        "process": {
            "args": ["/usr/bin/python3", "-c", ECHO, mode],
            "cwd": "/",
            "env": ["PATH=/usr/bin:/bin"],
            "user": {"uid": 0, "gid": 0},
        },
        "root": {"path": str(BASE_ROOTFS), "readonly": True},
        "hostname": "idle",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {
            "namespaces": [
                {"type": "pid"},
                {"type": "ipc"},
                {"type": "uts"},
                {"type": "mount"},
                {"type": "network", "path": f"/var/run/netns/{ns}"},
            ],
            "cgroupsPath": f"/{CGROUP_PARENT}/{cid}",
            "resources": {"cpu": {"quota": 100_000, "period": 100_000, "cpus": cpuset}},
        },
    }
    (work / "config.json").write_text(json.dumps(spec))
    runsc = ["runsc", "--root", str(work / "root")]
    boot = ["--platform=systrap", "--overlay2=root:memory", "--network=sandbox"]
    boot += ["--net-disconnect-ok", "--cpu-num-from-quota", *flags]
    try:
        with open(work / "log", "ab") as log:
            started = subprocess.run(
                [*NETNS_WRAPPER, *runsc, *boot, "run", "-detach", "-bundle", str(work), cid],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        if started.returncode != 0:
            raise RuntimeError(f"runsc run failed: {(work / 'log').read_text()[-800:]}")
        yield cid
    finally:
        subprocess.run([*runsc, "delete", "-force", cid], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def prepare_cgroup_parent() -> None:
    """A v1 cpuset cgroup starts empty, and a child's cpuset must lie within its parent's."""
    parent = Path("/sys/fs/cgroup/cpuset") / CGROUP_PARENT
    parent.mkdir(exist_ok=True)
    for name in ("cpuset.cpus", "cpuset.mems"):
        (parent / name).write_text((parent.parent / name).read_text())


def remove_cgroup_parent() -> None:
    for parent in Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}"):
        with contextlib.suppress(OSError):
            parent.rmdir()


def connect(address: str) -> socket.socket:
    deadline = time.monotonic() + 20
    while True:
        try:
            conn = socket.create_connection((address, PORT), timeout=5)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def ping(conn: socket.socket, pause_s: float) -> tuple[float, float]:
    """The round trip in ms after ``pause_s`` idle, and the server's spawn time (0: echo)."""
    time.sleep(pause_s)
    started = time.perf_counter()
    conn.sendall(b"x")
    answer = conn.recv(64)
    ms = (time.perf_counter() - started) * 1000
    return ms, (0.0 if answer == b"x" else float(answer))


def measure(
    targets: dict[str, str], pauses: list[float], runs: int
) -> dict[str, tuple[Figures, Figures]]:
    """Per target and pause: the round trips and the server's own spawn times."""
    conns = {name: connect(address) for name, address in targets.items()}
    samples: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for i in range(runs + 3):
        for name, conn in conns.items():
            for pause in pauses:
                ping(conn, 0)  # untimed: the pause below is then exactly the idle time
                sample = ping(conn, pause / 1000)
                if i >= 3:
                    samples.setdefault((name, pause), []).append(sample)
    for conn in conns.values():
        conn.close()
    out = {}
    for (name, pause), pairs in samples.items():
        label = f"{name}, {pause:g} ms idle"
        out[label] = (Figures(label, [a for a, _ in pairs]), Figures(label, [b for _, b in pairs]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--pauses", default="0,10,50")
    parser.add_argument("--spawn", action="store_true", help="spawn /bin/true before answering")
    parser.add_argument("--runsc-flag", action="append", default=[], help="added to both runsc")
    args = parser.parse_args()
    pauses = [float(p) for p in args.pauses.split(",")]
    mode = "spawn" if args.spawn else "echo"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("this bench compares 1- and 2-CPU sandboxes: it needs 2 host CPUs")
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    print("extra runsc flags:", " ".join(args.runsc_flag) or "none")
    try:
        prepare_cgroup_parent()
        with contextlib.ExitStack() as stack:
            targets: dict[str, str] = {}
            ns, address = stack.enter_context(netns("p", 0))
            stack.enter_context(plain_server(ns, mode))
            targets["plain netns"] = address
            for index, (tag, cpuset) in enumerate(
                (("1", str(cpus[0])), ("2", f"{cpus[0]},{cpus[1]}")), start=1
            ):
                ns, address = stack.enter_context(netns(f"g{tag}", index))
                stack.enter_context(runsc_server(ns, cpuset, mode, args.runsc_flag))
                targets[f"runsc, {tag}-CPU cpuset"] = address
            figures = measure(targets, pauses, args.runs)
    finally:
        remove_cgroup_parent()
    what = "spawn of /bin/true before each answer" if args.spawn else "echo"
    print(f"one-byte TCP ping-pong ({what}), {args.runs} rounds taken in turn; ms")
    print(f"{'target, idle before the ping':36} {'p50':>7} {'p90':>7} {'p99':>7} {'spawn p50':>10}")
    for rtt, spawn in figures.values():
        p90 = percentile(rtt.samples_ms, 90)
        print(f"{rtt.name:36} {rtt.p50:7.2f} {p90:7.2f} {rtt.p99:7.2f} {spawn.p50:10.2f}")
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


if __name__ == "__main__":
    main()
