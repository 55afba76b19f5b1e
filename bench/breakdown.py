"""The phases of creating a sandbox, timed by driving the mechanisms directly (no daemon).

Each run does what ``SandboxService.create`` and ``GVisorRuntime.start`` do, in the same order
and with the same mechanisms, but stamps the clock between the phases:

    lease     SlotNetwork.lease, with spares like the daemon (else namespaces, veths, nftables)
    prepare   SlotNetwork.prepare (eth0's inner address and route)
    disk      create_disk (sparse image, mkfs.ext4, loop mount; the daemon takes a spare)
    bundle    render_config + write_config (with the sized root the agent moves onto)
    run       runsc run -detach (returns once the agent process was started)
    state     RunscRunner.recorded_state (the check that it is running)
    ready     the agent answers /health (AgentClient.wait_ready)
    echo      POST /processes?stream=true of `echo hi` until its stdout event

The agent is the one the daemon runs (the ``agent`` setting, ``CORRAL_AGENT``: the static Go
binary by default, mounted as ``daemon.py`` mounts it). The phases run one after the other here
even where the service overlaps them (the slot's set-up runs beside the disk and bundle), so each
is seen on its own. With the Python agent, also measured: ``python -X importtime`` of the agent
inside a sandbox (top imports). With the Go agent, its own start (``CORRAL_AGENT_TRACE``: the
wall-clock end of each step, which gVisor's realtime clock lets us set against the host's): each
step's end after `runsc run` returned, and the steps' own lengths.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from corral.config import Settings
from corral.daemon import SPARE_SLOTS
from corral.network.slots import SlotNetwork
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import AgentMount, Resources, SandboxSpec
from corral.runtime.bundle import DiskRoot, render_config, write_config
from corral.runtime.cgroups import SandboxCgroups
from corral.runtime.disk import create_disk, remove_disk
from corral.runtime.generation import disk_headroom_mib
from corral.runtime.inject import go_agent_mount, host_agent_mount
from corral.runtime.reaper import become_subreaper
from corral.runtime.runsc import NetworkMode, RunscOptions, RunscRunner
from corral.service.agent_keys import new_agent_key

PHASES = ("lease", "prepare", "disk", "bundle", "run", "state", "ready", "echo")
DISK_MIB = 1024
_START_LINE = "corral agent start: "


def agent_start_steps(console: str, run_returned_ns: int) -> dict[str, float]:
    """The Go agent's start steps from its console (``CORRAL_AGENT_TRACE``): ms from `runsc run`
    returning to each step's end (negative: before it returned)."""
    for line in console.splitlines():
        if line.startswith(_START_LINE):
            steps = (field.split("=", 1) for field in line[len(_START_LINE) :].split())
            return {name: (int(ns) - run_returned_ns) / 1e6 for name, ns in steps}
    return {}


class Stamps:
    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = (now - self.last) * 1000
        self.last = now


def _agent_mount(work: Path) -> AgentMount:
    """The agent mount the daemon would use (``daemon.py``)."""
    if Settings().agent == "go":
        return go_agent_mount(compiled_dir=work / "agent")
    return host_agent_mount(work / "agent")


async def _one(
    network: SlotNetwork, runsc: RunscRunner, cgroups: SandboxCgroups, work: Path, rootfs: Path
) -> dict[str, float]:
    sid = "bd-" + secrets.token_hex(5)
    cid = f"{sid}-0001"
    sdir = work / sid
    sdir.mkdir()
    key = new_agent_key()
    stamps = Stamps()
    slot = await network.lease()
    stamps.mark("lease")
    try:
        await network.prepare(slot)
        stamps.mark("prepare")
        size = DISK_MIB + disk_headroom_mib(DISK_MIB)
        await create_disk(sdir / "disk.img", sdir / "disk", size)
        stamps.mark("disk")
        mount = _agent_mount(work)
        spec = SandboxSpec(
            sandbox_id=sid,
            rootfs=rootfs,
            resources=Resources(cpu=1, memory_mib=512, disk_mib=DISK_MIB),
            agent=AgentMount(mount.mounts, mount.argv, (("CORRAL_AGENT_TRACE", "1"),), mount.tools),
            netns_path=slot.netns_path,
        )
        disk_root = DiskRoot(sdir / "disk" / "root", DISK_MIB)  # as the daemon's generations
        disk_root.store.mkdir(mode=0o700)
        config = render_config(spec, cgroups_path=cgroups.path_for(cid), disk_root=disk_root)
        write_config(sdir / "bundle", config)
        stamps.mark("bundle")
        await runsc.run(
            cid,
            sdir / "bundle",
            network=NetworkMode(slot.netns_path),
            overlay_dir=sdir / "disk",
            log_path=sdir / "console.log",
            stdin_data=f"{key}\n".encode(),
        )
        stamps.mark("run")
        run_returned = time.time_ns()
        assert runsc.recorded_state(cid) == "running"
        stamps.mark("state")
        async with AgentClient(slot.host_address) as client:
            client.set_key(key)
            await client.wait_ready(20)
            stamps.mark("ready")
            stream = client.stream_process({"cmd": ["echo", "hi"]})
            async for event in stream:
                if event["type"] == "stdout":
                    stamps.mark("echo")
                    break
            await stream.aclose()
        console = (sdir / "console.log").read_text(errors="replace")
        for name, ms in agent_start_steps(console, run_returned).items():
            stamps.phases[f"agent {name}"] = ms
    finally:
        await runsc.delete_force(cid)
        cgroups.remove(cid)
        await remove_disk(sdir / "disk.img", sdir / "disk")
        await network.release(slot)
        shutil.rmtree(sdir, ignore_errors=True)
    return stamps.phases


async def _importtime(
    network: SlotNetwork, runsc: RunscRunner, cgroups: SandboxCgroups, work: Path, rootfs: Path
) -> str:
    """Boot one sandbox and run the agent's own interpreter with -X importtime on its imports."""
    sid = "bd-" + secrets.token_hex(5)
    cid = f"{sid}-0001"
    sdir = work / sid
    sdir.mkdir()
    key = new_agent_key()
    slot = await network.lease()
    try:
        await network.prepare(slot)
        await create_disk(sdir / "disk.img", sdir / "disk", 1024)
        mount = host_agent_mount(work / "agent")
        spec = SandboxSpec(
            sandbox_id=sid,
            rootfs=rootfs,
            resources=Resources(cpu=1, memory_mib=512, disk_mib=1024),
            agent=mount,
            netns_path=slot.netns_path,
        )
        write_config(sdir / "bundle", render_config(spec, cgroups_path=cgroups.path_for(cid)))
        await runsc.run(
            cid,
            sdir / "bundle",
            network=NetworkMode(slot.netns_path),
            overlay_dir=sdir / "disk",
            log_path=sdir / "console.log",
            stdin_data=f"{key}\n".encode(),
        )
        async with AgentClient(slot.host_address) as client:
            client.set_key(key)
            await client.wait_ready(20)
            # Same interpreter and flags as the agent; a second port so it does not collide.
            argv = [*mount.argv[:-1], "-X", "importtime", "-c", _IMPORT_PROBE, mount.argv[-1]]
            out: list[bytes] = []
            async for event in client.stream_process({"cmd": argv}):
                if event["type"] in ("stdout", "stderr"):
                    out.append(base64.b64decode(event["data"]))
        return b"".join(out).decode(errors="replace")
    finally:
        await runsc.delete_force(cid)
        cgroups.remove(cid)
        await remove_disk(sdir / "disk.img", sdir / "disk")
        await network.release(slot)
        shutil.rmtree(sdir, ignore_errors=True)


# Run the agent's one-file build (its code after the 16-byte .pyc header) under another name
# than __main__: it imports all it imports at start, but does not start. marshal is built in, so
# the probe adds no imports.
_IMPORT_PROBE = (
    "import marshal, sys; "
    "exec(marshal.loads(open(sys.argv[1], 'rb').read()[16:]), {'__name__': 'agent-probe'})"
)


def _summarise_importtime(text: str, top: int = 12) -> list[str]:
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_text, cumulative_text, name = line[len("import time:") :].split("|", 2)
        rows.append((int(cumulative_text), int(self_text), name.rstrip()))
    total = sum(s for _, s, _ in rows)
    lines = [f"agent imports inside the sandbox: {total / 1000:.1f} ms in total (self times)"]
    for cumulative, _self, name in sorted(rows, reverse=True)[:top]:
        lines.append(f"  {cumulative / 1000:7.1f} ms cumulative  {name}")
    return lines


async def run_breakdown(runs: int, rootfs: Path) -> None:
    become_subreaper()
    prefix = "cq" + secrets.token_hex(2)
    network = SlotNetwork(prefix=prefix, subnet="10.234.0.0/16", spare=SPARE_SLOTS)
    work = Path(tempfile.mkdtemp(prefix="corral-bench-bd-"))
    state = Path("/run/corral") / ("bd" + secrets.token_hex(4))
    runsc = RunscRunner(RunscOptions(binary="runsc", root=state))
    cgroups = SandboxCgroups("corral-bench")
    samples: dict[str, list[float]] = defaultdict(list)
    try:
        for i in range(runs + 2):
            phases = await _one(network, runsc, cgroups, work, rootfs)
            if i >= 2:  # two warm-up runs
                for name, ms in phases.items():
                    samples[name].append(ms)
        python = Settings().agent != "go"
        imports = await _importtime(network, runsc, cgroups, work, rootfs) if python else ""
    finally:
        await network.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    from _harness import percentile

    print(f"{'phase of create (mechanisms driven directly)':44} {'p50 ms':>9} {'p99 ms':>9}")
    total = 0.0
    for name in PHASES:
        values = samples[name]
        p50 = sorted(values)[len(values) // 2]
        total += p50
        print(f"  {name:42} {p50:9.2f} {percentile(values, 99):9.2f}")
    print(f"  {'sum of p50s':42} {total:9.2f}")
    print(f"agent: {'python' if imports else 'go'} (the daemon's, CORRAL_AGENT)")
    steps = [name for name in samples if name.startswith("agent ")]
    if steps:
        print()
        title = "the Go agent's start (ms after runsc returned)"
        print(f"{title:44} {'p50 end':>9} {'p50 own':>9}")
        steps.sort(key=lambda name: sorted(samples[name])[len(samples[name]) // 2])
        previous = 0.0
        for name in steps:
            end = sorted(samples[name])[len(samples[name]) // 2]
            own = "" if name == steps[0] else f"{end - previous:9.2f}"
            print(f"  {name.removeprefix('agent '):42} {end:9.2f} {own:>9}")
            previous = end
    if imports:
        print()
        for line in _summarise_importtime(imports):
            print(line)


def breakdown(runs: int, rootfs: Path) -> None:
    asyncio.run(run_breakdown(runs, rootfs))
