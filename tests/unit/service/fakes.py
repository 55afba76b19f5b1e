"""The service on its fakes: ``FakeRuntime`` (checkpoint and restore as files), ``FakeNetwork``
(slots in memory) and a fake agent answering the agent's HTTP API in memory (``FakeAgents``), so
park, wake, fork and reconciliation run in-process, in milliseconds, with every failure
injectable. What a real runsc and agent do is the integration and e2e suites' business."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from corral.config import Settings
from corral.network.base import Slot
from corral.network.fake import FakeNetwork
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import AgentMount
from corral.runtime.fake import FakeRuntime
from corral.service.model import CreateRequest
from corral.service.workspace import Workspace
from corral.storage import SandboxRecord
from tests.unit.conftest import make_settings


@dataclass
class FakeAgent:
    """One sandbox's agent: remembers what it was told, answers like the real one."""

    sandbox_id: str
    env: dict[str, str] = field(default_factory=dict)
    started: list[dict[str, object]] = field(default_factory=list)
    rekeyed: int = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        body = json.loads(request.content) if request.content else {}
        if path == "/health":
            return httpx.Response(200, json={"ok": True, "boot_id": "b", "pid": 1})
        if path == "/config" and method == "PUT":
            self.env = {**self.env, **body["env"]} if body.get("merge") else dict(body["env"])
            return httpx.Response(200, json={})
        if path == "/rekey":
            self.rekeyed += 1
            return httpx.Response(200, json={})
        if path == "/processes" and method == "POST":
            self.started.append(body)
            return httpx.Response(200, json={"pid": 100 + len(self.started)})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})


@dataclass
class FakeAgents:
    agents: dict[str, FakeAgent] = field(default_factory=dict)

    def connect(self, sandbox_id: str, slot: Slot) -> AgentClient:
        agent = self.agents.setdefault(sandbox_id, FakeAgent(sandbox_id))
        return AgentClient(slot.host_address, transport=httpx.MockTransport(agent.handle))


@dataclass
class Fakes:
    workspace: Workspace
    runtime: FakeRuntime
    network: FakeNetwork
    agents: FakeAgents
    settings: Settings

    async def running(self, **request: object) -> SandboxRecord:
        record = await self.workspace.creator.create(CreateRequest(**request))  # type: ignore[arg-type]
        assert record.state == "running"
        return record

    async def stop_daemon(self) -> Workspace:
        """Stop this workspace as a daemon stops (its sandboxes run on) and build the next one
        over the same data dir and runtime, with the slots left on the host (``existing``).
        The test changes what a crash would have left, then starts it (which reconciles)."""
        await self.workspace.stop()
        left = self.network
        self.network = FakeNetwork(existing=set(left.leased))
        self.network.counted = dict(left.counted)  # the kernel's counters outlive the daemon
        self.workspace = build(self.settings, self.runtime, self.network, self.agents)
        return self.workspace


def build(
    settings: Settings, runtime: FakeRuntime, network: FakeNetwork, agents: FakeAgents
) -> Workspace:
    return Workspace.build(
        settings, runtime, network, AgentMount(mounts=(), argv=()), connect_agent=agents.connect
    )


@pytest.fixture
async def fakes(tmp_path: Path) -> AsyncIterator[Fakes]:
    settings = make_settings(tmp_path)
    runtime, network, agents = FakeRuntime(), FakeNetwork(), FakeAgents()
    workspace = build(settings, runtime, network, agents)
    await workspace.start()
    state = Fakes(workspace, runtime, network, agents, settings)
    try:
        yield state
    finally:
        await state.workspace.stop()
