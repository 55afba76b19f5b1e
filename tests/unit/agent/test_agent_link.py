"""The daemon's link to an agent is private: a proxy set in the daemon's environment is not
used for it (the link goes straight to the sandbox's slot address)."""

from __future__ import annotations

import pytest

from corral.runtime.agent_client import AgentClient
from tests.unit.agent.conftest import AGENT_KEY, LocalAgent, _free_port


async def test_a_proxy_in_the_environment_is_not_used_for_the_agent(
    agent: LocalAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_proxy = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead_proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with AgentClient("127.0.0.1", agent.port) as client:
        client.set_key(AGENT_KEY)
        assert (await client.health())["pid"] == agent.pid
