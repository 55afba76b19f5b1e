"""The agent's key: without it the agent answers nothing but an anonymous health check; rekey
replaces it; the stdin it came on is not inherited by its children."""

from __future__ import annotations

import base64

import httpx
import pytest

from corral.runtime.agent_client import AgentClient, AgentError
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
