"""The agent's key: without it the agent answers nothing but an anonymous health check; rekey
replaces it (also as a restored agent's readiness check, ``rekey_when_ready``); the stdin it came on
is not inherited by its children."""

from __future__ import annotations

import base64

import httpx
import pytest

from corral.runtime.agent_client import AgentClient, AgentError, AgentUnavailable
from tests.unit.agent.conftest import AGENT_KEY, LocalAgent


async def test_without_the_key_only_an_empty_health_check_is_answered(agent: LocalAgent) -> None:
    base = f"http://127.0.0.1:{agent.port}"
    async with httpx.AsyncClient(base_url=base) as anonymous:
        health = await anonymous.get("/health")
        assert health.status_code == 200
        assert health.json() == {"ok": True}  # no boot id, no pid
        for headers in ({}, {"Authorization": "Bearer " + "0" * 64}, {"Authorization": AGENT_KEY}):
            started = await anonymous.post(
                "/processes", json={"cmd": ["touch", "/tmp/never"]}, headers=headers
            )
            assert started.status_code == 401
            assert started.json()["code"] == "unauthorized"
            listed = await anonymous.get("/files/list", params={"path": "/"}, headers=headers)
            assert listed.status_code == 401
    assert await agent.client.list_processes() == []  # nothing was started


async def test_rekey_replaces_the_key_and_the_boot_id(agent: LocalAgent) -> None:
    before = await agent.client.health()
    new_key = "cd" * 32
    await agent.client.rekey(new_key, boot_id="f" * 32, seed="00" * 32)
    after = await agent.client.health()
    assert after["boot_id"] == "f" * 32 != before["boot_id"]
    async with AgentClient("127.0.0.1", agent.port) as old:
        old.set_key(AGENT_KEY)
        with pytest.raises(AgentError) as refused:
            await old.list_processes()
        assert refused.value.status == 401


async def test_rekey_when_ready_is_the_readiness_check_and_the_rekey(agent: LocalAgent) -> None:
    before = await agent.client.health()
    async with AgentClient("127.0.0.1", agent.port) as restored:
        restored.set_key(AGENT_KEY)  # the key of the agent that was checkpointed
        await restored.rekey_when_ready("cd" * 32, boot_id="e" * 32, seed="00", timeout=30)
        after = await restored.health()  # answered in full: the client sends the new key
    assert after["boot_id"] == "e" * 32 != before["boot_id"]
    with pytest.raises(AgentError) as refused:
        await agent.client.list_processes()  # the old key is no more
    assert refused.value.status == 401


async def test_rekey_when_ready_after_an_answer_that_was_lost(agent: LocalAgent) -> None:
    """A rekey that reached the agent but whose answer never came back: the agent already holds
    the new key, so the old one is refused; the rekey is repeated with the new key."""
    new_key = "cd" * 32
    await agent.client.rekey(new_key, boot_id="1" * 32, seed="00")  # the "lost" one
    async with AgentClient("127.0.0.1", agent.port) as restored:
        restored.set_key(AGENT_KEY)
        await restored.rekey_when_ready(new_key, boot_id="2" * 32, seed="00", timeout=30)
        assert (await restored.health())["boot_id"] == "2" * 32


async def test_rekey_when_ready_refuses_an_agent_that_holds_neither_key(agent: LocalAgent) -> None:
    async with AgentClient("127.0.0.1", agent.port) as stranger:
        stranger.set_key("0" * 64)
        with pytest.raises(AgentError, match="refused both") as refused:
            await stranger.rekey_when_ready("cd" * 32, boot_id="3" * 32, seed="00", timeout=30)
        assert refused.value.status == 401
    assert (await agent.client.health())["boot_id"] != "3" * 32  # its key is unchanged


async def test_rekey_when_ready_names_the_agent_when_nothing_listens() -> None:
    async with AgentClient("127.0.0.1", 1) as client:
        client.set_key(AGENT_KEY)
        with pytest.raises(AgentUnavailable, match=r"127\.0\.0\.1:1 did not answer"):
            await client.rekey_when_ready("cd" * 32, boot_id="4" * 32, seed="00", timeout=0.05)


async def test_rekey_refuses_a_malformed_key(agent: LocalAgent) -> None:
    with pytest.raises(AgentError, match="64 lowercase hex"):
        await agent.client.rekey("short", boot_id="a" * 32, seed="")
    assert (await agent.client.health())["ok"] is True  # the old key still works


async def test_children_see_neither_the_key_nor_its_pipe(agent: LocalAgent) -> None:
    script = (
        "import os,sys; print(os.readlink('/proc/self/fd/0')); "
        "print(sys.stdin.read()); print(open('/proc/%d/cmdline' % os.getppid()).read())"
    )
    out = b""
    async for event in agent.client.stream_process({"cmd": ["python3", "-c", script]}):
        if event["type"] == "stdout":
            out += base64.b64decode(event["data"])
    assert out.splitlines()[0] == b"/dev/null"
    assert AGENT_KEY.encode() not in out
