"""The Go agent gives back the memory a burst of requests grew, once it goes quiet
(``src/corral/agent/go/memory.go``): an idle sandbox should not keep the heap of its last burst."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.unit.agent.conftest import LocalAgent

MiB = 1024 * 1024


def anonymous_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no Anonymous line for pid {pid}")


@pytest.mark.parametrize("agent", ["go"], indirect=True)
async def test_memory_grown_by_a_burst_goes_back_once_the_agent_is_quiet(
    agent: LocalAgent,
) -> None:
    before = anonymous_bytes(agent.pid)
    for _ in range(4):  # 8 MiB of output each, buffered by the agent, then forgotten
        async for _event in agent.client.stream_process(
            {"cmd": ["head", "-c", str(8 * MiB), "/dev/zero"]}, forget=True
        ):
            pass
    grown = anonymous_bytes(agent.pid)
    assert grown > before + 8 * MiB, (before, grown)
    # No request from here on: the agent's quiet spell starts now. Poll what it holds (a slow
    # host only makes this wait longer; the bound guards against an agent that never gives back).
    for _ in range(600):
        if anonymous_bytes(agent.pid) < grown - 6 * MiB:
            break
        await asyncio.sleep(0.1)
    assert anonymous_bytes(agent.pid) < grown - 6 * MiB, (before, grown)
