"""Idle freezing on the unit harness: an idle running sandbox is frozen, a ready pool's never is
(a claimed sandbox's first call would wait for the thaw)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.runtime.agent_client import AgentClient
from corral.runtime.base import AgentMount
from corral.service.model import CreateRequest
from corral.service.workspace import Workspace
from tests.unit.conftest import LocalAgentRuntime, LoopbackNetwork, make_settings


@pytest.fixture
async def freezing(tmp_path: Path) -> AsyncIterator[Workspace]:
    """A workspace that freezes whatever has been idle at all (the rule, not the clock)."""
    runtime = LocalAgentRuntime()
    workspace = Workspace.build(
        make_settings(tmp_path, freeze_idle_seconds=1e-6),
        runtime,
        LoopbackNetwork(),
        AgentMount(mounts=(), argv=()),
        connect_agent=lambda sandbox_id, _slot: AgentClient("127.0.0.1", runtime.ports[sandbox_id]),
    )
    await workspace.start()
    try:
        yield workspace
    finally:
        await workspace.stop()
        runtime.close()


async def test_an_idle_sandbox_is_frozen_but_a_pooled_one_is_not(freezing: Workspace) -> None:
    ws = freezing
    mine = await ws.creator.create(CreateRequest(template="base"))
    ready = await ws.creator.create(CreateRequest(template="base"))
    pooled = ws.db.sandboxes.update(ready.id, pooled=True)
    assert not await ws.sandboxes.freeze_if_idle(pooled)
    assert not ws.sandboxes.freezer.is_frozen(ready.id)
    record = ws.db.sandboxes.get(mine.id)
    assert record is not None
    assert await ws.sandboxes.freeze_if_idle(record)
    assert ws.sandboxes.freezer.is_frozen(mine.id)
