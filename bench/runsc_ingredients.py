"""Which of corral's ingredients makes runsc itself slower than raw: raw runsc plus one at a time.

    .venv/bin/python bench/runsc_ingredients.py [--runs N] [--only NAME ...]

Every variant runs the same workloads with runsc directly (no daemon, no agent): ``echo hi``
(``runsc run`` → first output) and an idle ``python3`` (``runsc checkpoint`` of it, then ``runsc
restore`` of that image into a new id). The variants:

    raw        the raw baseline of the other benches: ``runsc spec``'s config,
               ``--network=none --overlay2=root:memory``
    spec       corral's OCI config (``bundle.render_config``: its mounts of /dev, /proc, /sys,
               capabilities, rlimits, env) without the ingredients below
    mounts     + the agent mounts every sandbox has (both agents, the Python runtime), resolv.conf
    cgroup     + ``cgroupsPath`` and resources (cpu quota, memory, pids), as corral sets them
    disk       + ``--overlay2=all:dir=`` a loop-mounted ext4 disk (made untimed, as a pool would)
    diskroot   + disk + the sized root's tmpfs mount hint
    cpuflag    + ``--cpu-num-from-quota``
    wrapper    + the ``unshare``/``sh``/``mount`` wrapper corral put around run/restore before
    netns      + ``--network=sandbox`` in a namespace with a veth (needs the wrapper)
    direct     + what replaced the wrapper: runsc started from a thread that hid /proc/sys/net
               by system call (``runtime/net_sysctl_hidden.py``)
    netns-direct  the namespace, started that way
    corral-wrapper  every ingredient, with the wrapper: as the daemon booted before
    corral     every ingredient, as the daemon boots a sandbox now
    agent      (``--memory`` only) every ingredient, with the Go agent as the init instead of
               ``sleep`` (no key: it serves nothing, as an idle sandbox's agent does nothing)

``--memory`` measures instead the host memory of ``--count`` idle containers of each variant
(``sleep``; the wrapper variants are left out: the wrapper is gone once runsc has started), all
running at once, by role (``_measure.memory_by_role``), beside ``raw``: which of corral's
ingredients costs memory in runsc itself, and what the agent adds.

Each round runs every variant in turn, so load weighs on all alike; the table gives medians and
the ratio to ``raw`` in the same run. Root and real runsc; everything made is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import BASE_ROOTFS
from _measure import memory_by_role, memory_table, process_trees
from lifecycle import reap_forever

from corral.runtime.base import AgentMount, Resources, SandboxSpec
from corral.runtime.bundle import DiskRoot, render_config
from corral.runtime.disk import create_disk, remove_disk
from corral.runtime.generation import disk_headroom_mib
from corral.runtime.inject import GO_AGENT_TARGET, go_agent_mount
from corral.runtime.net_sysctl_hidden import _spawn
from corral.runtime.reaper import become_subreaper

# What corral put around a networked run/restore before net_sysctl_hidden.py (the ``direct``
# ingredient): three programs before runsc.
WRAPPER = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    'mount -t tmpfs none /proc/sys/net && exec "$0" "$@"',
]

IDLE = "import time; time.sleep(1e6)"
INGREDIENTS = ("spec", "mounts", "cgroup", "disk", "diskroot", "cpuflag", "netns", "direct")
VARIANTS: dict[str, set[str]] = {
    "raw": set(),
    "spec": {"spec"},
    "mounts": {"spec", "mounts"},
    "cgroup": {"spec", "cgroup"},
    "disk": {"spec", "disk"},
    "diskroot": {"spec", "disk", "diskroot"},
    "cpuflag": {"spec", "cpuflag"},
    "wrapper": {"spec", "wrapper"},
    "netns": {"spec", "wrapper", "netns"},
    "direct": {"spec", "direct"},
    "netns-direct": {"spec", "netns", "direct"},
    "corral-wrapper": {*INGREDIENTS, "wrapper"} - {"direct"},
    "corral": set(INGREDIENTS),
}
RESOURCES = Resources(cpu=1.0, memory_mib=512, disk_mib=2048)
CGROUP_PARENT = "corral-ingredients"


class Lab:
    """Bundles, disks and namespaces for the variants, under one temporary directory."""

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="corral-ingr-"))
        self.state = self.work / "state"
        self.counter = 0
        self.agent = go_agent_mount(self.work / "agent")
        self.tag = secrets.token_hex(2)

    def next_id(self) -> str:
        self.counter += 1
        return f"ingr{self.tag}{self.counter:05d}"

    def config(self, have: set[str], args: list[str], cid: str, extra: dict[str, Any]) -> Path:
        bundle = self.work / cid
        bundle.mkdir()
        if "spec" not in have:
            subprocess.run(["runsc", "spec", "-bundle", str(bundle), "--", *args], check=True)
            config = json.loads((bundle / "config.json").read_text())
            config["root"] = {"path": str(BASE_ROOTFS), "readonly": False}
            config["process"]["terminal"] = False
        else:
            agent = AgentMount(
                mounts=self.agent.mounts if "mounts" in have else (), argv=tuple(args)
            )
            spec = SandboxSpec(
                sandbox_id=cid,
                rootfs=BASE_ROOTFS,
                resources=RESOURCES,
                agent=agent,
                netns_path=extra.get("netns"),
                resolv_conf="/etc/resolv.conf" if "mounts" in have else None,
            )
            config = render_config(
                spec, cgroups_path=f"/{CGROUP_PARENT}/{cid}", disk_root=extra.get("diskroot")
            )
            if "cgroup" not in have:
                del config["linux"]["cgroupsPath"]
                del config["linux"]["resources"]
            config["process"]["env"] = [
                e for e in config["process"]["env"] if not e.startswith("CORRAL_")
            ]
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle

    def flags(self, have: set[str], extra: dict[str, Any]) -> list[str]:
        flags = ["runsc", "--root", str(self.state), "--platform=systrap"]
        disk = extra.get("disk")
        flags.append(f"--overlay2=all:dir={disk}" if disk else "--overlay2=root:memory")
        if "cpuflag" in have:
            flags.append("--cpu-num-from-quota")
        if "netns" in have:
            flags += ["--network=sandbox", "--net-disconnect-ok"]
        else:
            flags.append("--network=none")
        return flags

    @contextmanager
    def container(self, have: set[str], args: list[str]) -> Iterator[tuple[str, Path, list[str]]]:
        """A container id, its bundle and the runsc argv prefix for a run/restore of it; its
        disk and namespace are made here (untimed) and removed after."""
        cid = self.next_id()
        extra: dict[str, Any] = {}
        made_disk = made_ns = False
        try:
            if "disk" in have:
                mount = self.work / f"{cid}.disk"
                size = RESOURCES.disk_mib + disk_headroom_mib(RESOURCES.disk_mib)
                asyncio.run(create_disk(self.work / f"{cid}.img", mount, size))
                made_disk = True
                extra["disk"] = mount
                if "diskroot" in have:
                    store = mount / "root"
                    store.mkdir(mode=0o700)
                    extra["diskroot"] = DiskRoot(store, RESOURCES.disk_mib)
            if "netns" in have:
                make_netns(cid)
                made_ns = True
                extra["netns"] = f"/run/netns/{cid}"
            bundle = self.config(have, args, cid, extra)
            argv = self.flags(have, extra)
            if "wrapper" in have:
                argv = [*WRAPPER, *argv]
            yield cid, bundle, argv
        finally:
            subprocess.run(
                ["runsc", "--root", str(self.state), "delete", "-force", cid], capture_output=True
            )
            shutil.rmtree(self.work / cid, ignore_errors=True)
            if made_disk:
                asyncio.run(remove_disk(self.work / f"{cid}.img", self.work / f"{cid}.disk"))
            if made_ns:
                remove_netns(cid)
            for controller in Path("/sys/fs/cgroup").iterdir():
                with contextlib.suppress(OSError):
                    (controller / CGROUP_PARENT / cid).rmdir()

    def close(self) -> None:
        for controller in Path("/sys/fs/cgroup").iterdir():
            with contextlib.suppress(OSError):
                (controller / CGROUP_PARENT).rmdir()
        shutil.rmtree(self.work, ignore_errors=True)


def make_netns(name: str) -> None:
    """A namespace with lo up and an ``eth0`` (a veth whose peer stays in the root namespace,
    down) holding the sandbox's inner address, as a slot's sandbox namespace has."""
    peer = "vi" + name[-8:]
    for argv in (
        ["ip", "netns", "add", name],
        ["ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", name],
        ["ip", "-n", name, "addr", "add", "169.254.0.21/30", "dev", "eth0"],
        ["ip", "-n", name, "link", "set", "eth0", "up"],
        ["ip", "-n", name, "link", "set", "lo", "up"],
        ["ip", "-n", name, "route", "add", "default", "via", "169.254.0.22"],
    ):
        subprocess.run(argv, check=True, capture_output=True)


def remove_netns(name: str) -> None:
    subprocess.run(["ip", "link", "del", "vi" + name[-8:]], capture_output=True)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def start(have: set[str], argv: list[str], stdout: int) -> subprocess.Popen[bytes]:
    """Start a runsc run/restore as the variant does: directly, through the wrapper (already in
    ``argv``), or from a thread that hid /proc/sys/net (``direct``)."""
    if "direct" in have:
        return _spawn(argv, subprocess.DEVNULL, stdout, subprocess.DEVNULL)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout)


def boot(have: set[str], argv: list[str]) -> None:
    if start(have, argv, subprocess.DEVNULL).wait() != 0:
        raise RuntimeError(f"{' '.join(argv[-6:])} failed")


def first_output(lab: Lab, have: set[str]) -> float:
    with lab.container(have, ["echo", "hi"]) as (cid, bundle, argv):
        started = time.perf_counter()
        proc = start(have, [*argv, "run", "-bundle", str(bundle), cid], subprocess.PIPE)
        assert proc.stdout is not None
        seen = b""
        while b"hi" not in seen:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                proc.communicate()
                raise RuntimeError("runsc run ended without output")
            seen += chunk
        took = (time.perf_counter() - started) * 1000
        proc.communicate()
        return took


def park_wake(lab: Lab, have: set[str]) -> tuple[float, float]:
    """(ms of ``runsc checkpoint`` of an idle python3, ms of ``runsc restore`` of its image)."""
    image = lab.work / f"image-{lab.next_id()}"
    with lab.container(have, ["python3", "-c", IDLE]) as (cid, bundle, argv):
        boot(have, [*argv, "run", "-detach", "-bundle", str(bundle), cid])
        time.sleep(0.3)
        base = ["runsc", "--root", str(lab.state)]
        started = time.perf_counter()
        subprocess.run(
            [*base, "checkpoint", "--image-path", str(image), cid], check=True, capture_output=True
        )
        park = (time.perf_counter() - started) * 1000
    with lab.container(have, ["python3", "-c", IDLE]) as (cid, bundle, argv):
        started = time.perf_counter()
        boot(
            have,
            [*argv, "restore", "-detach", "--image-path", str(image), "-bundle", str(bundle), cid],
        )
        wake = (time.perf_counter() - started) * 1000
    shutil.rmtree(image, ignore_errors=True)
    return park, wake


def idle_memory(lab: Lab, names: list[str], count: int) -> None:
    """``count`` idle containers of every variant at once; their memory by role beside raw's."""
    with contextlib.ExitStack() as stack:
        tokens: dict[str, list[str]] = {}
        for name in names:
            have = VARIANTS.get(name) or set(INGREDIENTS)
            init = [GO_AGENT_TARGET] if name == "agent" else ["sleep", "100000"]
            for _ in range(count):
                cid, bundle, argv = stack.enter_context(lab.container(have, init))
                boot(have, [*argv, "run", "-detach", "-bundle", str(bundle), cid])
                tokens.setdefault(name, []).append(str(bundle))
        time.sleep(2)
        print(f"{count} idle containers of each variant at once; load {os.getloadavg()}")
        trees = process_trees([t for ts in tokens.values() for t in ts])
        memory = {n: [memory_by_role(trees[t]) for t in ts] for n, ts in tokens.items()}
    for name in names[1:]:
        lines, beyond_pss, beyond_uss = memory_table(memory[name], memory["raw"])
        print(f"\n{name} beside raw: {beyond_pss:+.2f} MiB PSS, {beyond_uss:+.2f} MiB USS")
        print("\n".join(line.replace("corral", "variant") for line in lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", choices=[*VARIANTS, "agent"], default=None)
    parser.add_argument("--memory", action="store_true", help="idle memory instead of times")
    parser.add_argument("--count", type=int, default=3, help="containers per variant (--memory)")
    args = parser.parse_args()
    become_subreaper()
    reap_forever()  # runsc delete waits for the sandbox process, which a subreaper must reap
    lab = Lab()
    if args.memory:
        wanted = args.only or [*VARIANTS, "agent"]
        memory_names = [
            "raw",
            *[v for v in wanted if v not in ("raw", "wrapper", "netns", "corral-wrapper")],
        ]
        try:
            idle_memory(lab, memory_names, args.count)
        finally:
            lab.close()
        return
    names = ["raw", *[v for v in (args.only or VARIANTS) if v not in ("raw", "agent")]]
    samples: dict[str, dict[str, list[float]]] = {
        n: {"run": [], "checkpoint": [], "restore": []} for n in names
    }
    print(f"load average before: {os.getloadavg()}")
    try:
        for i in range(args.runs + 1):
            for name in names:
                have = VARIANTS[name]
                run = first_output(lab, have)
                park, wake = park_wake(lab, have)
                if i:  # the first round warms up
                    samples[name]["run"].append(run)
                    samples[name]["checkpoint"].append(park)
                    samples[name]["restore"].append(wake)
    finally:
        lab.close()
    print(f"load average after: {os.getloadavg()}")
    raw = {k: statistics.median(v) for k, v in samples["raw"].items()}
    print(f"medians of {args.runs} rounds, ms (ratio to raw in the same run)")
    print(f"{'variant':10} {'run→output':>18} {'checkpoint':>18} {'restore':>18}")
    for name in names:
        cells = []
        for measure in ("run", "checkpoint", "restore"):
            med = statistics.median(samples[name][measure])
            cells.append(f"{med:8.1f} {med / raw[measure]:6.2f}x")
        print(f"{name:10} " + " ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
