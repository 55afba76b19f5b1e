"""Unit-test doubles for the service: sandboxes whose "runtime" is the real agent run as a plain
host process on a loopback port, and a loopback network. The agent's behaviour is real; only the
isolation is missing, which the integration and e2e suites cover.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from corral.agent import AGENT_PATH
from corral.api.app import create_app
from corral.config import Settings
from corral.network.base import NoFreeSlot, Slot, Traffic
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import (
    AgentMount,
    RuntimeFailure,
    RuntimeInfo,
    RuntimeStatus,
    SandboxSpec,
    Usage,
)
from corral.service.workspace import Workspace


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def default_signals() -> None:
    """Give an agent every signal at its default, as runsc starts it in a sandbox (its init).
    A test run started in the background by a non-interactive shell (``./scripts/test &``) has
    SIGINT and SIGQUIT ignored, the agent and its children would inherit that, and Ctrl-C on a
    terminal would not stop what runs there."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


@dataclass
class LocalAgentRuntime:
    """Runs each sandbox's agent as a host process on its own loopback port."""

    name: str = "local"
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    oom: set[str] = field(default_factory=set)
    fail_start: bool = False
    specs: dict[str, SandboxSpec] = field(default_factory=dict)
    # Python run in the sandbox's process before its agent: it execs the agent (its argv[1])
    # when done, or never does (a boot that hangs or dies).
    boot_prelude: str | None = None

    async def start(self, spec: SandboxSpec) -> None:
        if self.fail_start:
            raise RuntimeFailure(f"starting sandbox {spec.sandbox_id}: injected failure")
        port = free_port()
        self.specs[spec.sandbox_id] = spec
        env = {k: v for k, v in spec.agent.env}
        env.update(
            CORRAL_AGENT_HOST="127.0.0.1",
            CORRAL_AGENT_PORT=str(port),
            PATH=os.environ.get("PATH", "/usr/bin:/bin"),
        )
        argv = [sys.executable, "-I", "-S", str(AGENT_PATH)]
        if self.boot_prelude is not None:
            argv[3:3] = ["-c", self.boot_prelude]
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=default_signals,
        )
        assert process.stdin is not None
        process.stdin.write(f"{spec.agent_key or ''}\n".encode())  # as runsc's stdin pipe does
        process.stdin.close()
        self.processes[spec.sandbox_id] = process
        self.ports[spec.sandbox_id] = port

    async def info(self, sandbox_id: str) -> RuntimeInfo:
        proc = self.processes.get(sandbox_id)
        if proc is None:
            return RuntimeInfo(RuntimeStatus.MISSING)
        if proc.poll() is not None:
            return RuntimeInfo(RuntimeStatus.STOPPED, oom_killed=sandbox_id in self.oom)
        return RuntimeInfo(RuntimeStatus.RUNNING)

    async def list_ids(self) -> list[str]:
        return list(self.processes)

    async def destroy(self, sandbox_id: str) -> None:
        proc = self.processes.pop(sandbox_id, None)
        self.ports.pop(sandbox_id, None)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def crash(self, sandbox_id: str, *, oom: bool = False) -> None:
        if oom:
            self.oom.add(sandbox_id)
        proc = self.processes[sandbox_id]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    async def checkpoint(
        self,
        sandbox_id: str,
        image_dir: Path,
        *,
        leave_running: bool,
        defer_cleanup: bool = False,
    ) -> None:
        raise RuntimeFailure("checkpoint is not supported by the local test runtime")

    async def cleanup(self, sandbox_id: str) -> None:
        return None

    async def restore(self, spec: SandboxSpec, image_dir: Path) -> None:
        raise RuntimeFailure("restore is not supported by the local test runtime")

    async def pause(self, sandbox_id: str) -> None:
        return None

    async def resume(self, sandbox_id: str) -> None:
        return None

    async def freeze(self, sandbox_id: str) -> None:
        return None

    async def thaw(self, sandbox_id: str) -> None:
        return None

    async def disk_usage_mib(self, sandbox_id: str) -> int:
        return 0

    async def usage(self, sandbox_id: str) -> Usage | None:
        """The agent process's own CPU time and resident memory, from /proc."""
        proc = self.processes.get(sandbox_id)
        if proc is None or proc.poll() is not None:
            return None
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()
        ticks = os.sysconf("SC_CLK_TCK")
        resident = int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1])
        return Usage(
            cpu_seconds=(int(fields[11]) + int(fields[12])) / ticks,
            memory_bytes=resident * os.sysconf("SC_PAGE_SIZE"),
        )

    def close(self) -> None:
        for sandbox_id in list(self.processes):
            proc = self.processes.pop(sandbox_id)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass
class LoopbackNetwork:
    """Slots without namespaces: every sandbox is reached on 127.0.0.1. ``counted`` holds each
    leased slot's traffic counts (from zero at lease, gone at release), moved by tests."""

    size: int = 64
    leased: set[int] = field(default_factory=set)
    prepared: list[int] = field(default_factory=list)
    counted: dict[int, Traffic] = field(default_factory=dict)

    async def lease(self, index: int | None = None, *, refill: bool = True) -> Slot:
        if index is None:
            free = [i for i in range(1, self.size + 1) if i not in self.leased]
            if not free:
                raise NoFreeSlot("all slots are leased")
            index = free[0]
        self.leased.add(index)
        self.counted.setdefault(index, Traffic())
        return Slot(index, f"fake-{index}", f"/run/netns/fake-{index}", "127.0.0.1")

    async def traffic(self, slot: Slot) -> Traffic | None:
        return self.counted.get(slot.index)

    async def prepare(self, slot: Slot) -> None:
        self.prepared.append(slot.index)

    async def release(self, slot: Slot) -> None:
        self.leased.discard(slot.index)
        self.counted.pop(slot.index, None)

    def build_ahead(self, count: int) -> None:
        return None

    def refill(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass
class Harness:
    workspace: Workspace
    runtime: LocalAgentRuntime
    network: LoopbackNetwork
    settings: Settings


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    images = tmp_path / "images"
    rootfs = images / "base" / "rootfs"
    rootfs.mkdir(parents=True, exist_ok=True)
    (images / "base" / "image.json").write_text("{}")
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "images_dir": images,
        "cpus": 2,
        "memory_mib": 4096,
        "disk_mib": 20000,
        "default_memory_mib": 256,
        "default_disk_mib": 512,
        "max_memory_mib": 2048,
        "max_disk_mib": 8192,
    }
    values.update(overrides)
    return Settings(**values).resolved()  # type: ignore[arg-type]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    settings = make_settings(tmp_path)
    runtime = LocalAgentRuntime()
    network = LoopbackNetwork()
    workspace = Workspace.build(
        settings,
        runtime,
        network,
        AgentMount(mounts=(), argv=()),
        connect_agent=lambda sandbox_id, _slot: AgentClient("127.0.0.1", runtime.ports[sandbox_id]),
    )
    await workspace.start()
    try:
        yield Harness(workspace, runtime, network, settings)
    finally:
        await workspace.stop()
        runtime.close()


@dataclass
class Served:
    """The app on the unit harness behind a real HTTP server on loopback (streams, SSE)."""

    url: str
    harness: Harness
    admin_key: str

    def client(self, key: str | None, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30.0, **kwargs)

    def key(self, name: str, role: str, **options: Any) -> str:
        key, _ = self.harness.workspace.api_keys.issue(name, role, **options)
        return key


@pytest.fixture
async def served(harness: Harness) -> AsyncIterator[Served]:
    app = create_app(harness.workspace, manage_lifespan=False)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    key = harness.settings.admin_key_path.read_text().strip()
    try:
        yield Served(f"http://127.0.0.1:{port}", harness, key)
    finally:
        server.should_exit = True
        await task
