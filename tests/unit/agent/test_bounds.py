"""The agent's process table is bounded, and the daemon never holds more than a bounded answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from corral.agent import processes
from corral.runtime import agent_transport
from corral.runtime.agent_client import AgentClient, AgentError
from tests.unit.agent.conftest import LocalAgent


async def test_a_huge_tag_or_command_is_refused_with_the_bound(agent: LocalAgent) -> None:
    with pytest.raises(AgentError) as tag:
        await agent.client.start_process({"cmd": ["true"], "tag": "x" * 100_000})
    assert tag.value.code == "too_large" and tag.value.status == 413
    assert "'tag'" in str(tag.value) and str(processes.MAX_TAG_BYTES) in str(tag.value)
    with pytest.raises(AgentError) as cmd:
        await agent.client.start_process({"shell": "echo " + "y" * 300_000})
    assert cmd.value.code == "too_large" and "'cmd'" in str(cmd.value)
    assert await agent.client.list_processes() == []  # nothing was started


async def test_a_full_table_forgets_finished_processes_and_refuses_running_ones(
    agent: LocalAgent,
) -> None:
    # Fills the real table (1024 slots) with sleepers, killed at the end (and by the fixture).
    tag = "t" * (processes.MAX_TAG_BYTES - 8)
    finished = [await agent.client.start_process({"cmd": ["true"], "tag": tag}) for _ in range(4)]
    for pid in finished:
        async for event in agent.client.events(pid):
            if event["type"] == "exit":
                break
    sleepers = []
    for _ in range(processes.MAX_PROCESSES - len(finished)):
        sleepers.append(await agent.client.start_process({"cmd": ["sleep", "600"], "tag": tag}))
    # Full: the next starts push out the finished ones, oldest first.
    for _ in finished:
        sleepers.append(await agent.client.start_process({"cmd": ["sleep", "600"], "tag": tag}))
    listed = await agent.client.list_processes()
    assert len(listed) == processes.MAX_PROCESSES
    assert not {p["pid"] for p in listed} & set(finished)
    with pytest.raises(AgentError) as full:
        await agent.client.start_process({"cmd": ["true"]})
    assert full.value.code == "too_large"
    assert f"at most {processes.MAX_PROCESSES}" in str(full.value)
    for pid in sleepers:
        await agent.client.signal(pid, "SIGKILL")


async def test_the_client_refuses_an_answer_over_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_transport, "MAX_ANSWER_BYTES", 1000)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"processes": [{"tag": "z" * 5000}]})

    async with AgentClient("127.0.0.1", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(AgentError) as exc:
            await client.list_processes()
    assert exc.value.code == "too_large" and "passed" in str(exc.value)


async def test_the_client_stops_reading_an_endless_event_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_transport, "MAX_ANSWER_BYTES", 1000)

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b"a" * 100  # never a newline

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    async with AgentClient("127.0.0.1", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(AgentError) as exc:
            async for _ in client.events(1):
                pass
    assert exc.value.code == "too_large"
