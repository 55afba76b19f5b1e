"""Directory watches of the real agent (inotify through ctypes), through ``AgentClient``."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime.agent_client import AgentError
from tests.unit.agent.conftest import LocalAgent


async def events_until(agent: LocalAgent, watch_id: int, count: int) -> list[dict[str, object]]:
    seen: list[dict[str, object]] = []
    for _ in range(50):  # each call waits for the agent to have events; bounded, not a sleep
        batch = await agent.client.watch_events(watch_id, wait=2.0)
        seen.extend(batch["events"])
        if len(seen) >= count:
            break
    return seen


async def test_a_recursive_watch_sees_what_happens_below(agent: LocalAgent, tmp_path: Path) -> None:
    root = tmp_path / "watched"
    (root / "sub").mkdir(parents=True)
    watch_id = await agent.client.create_watch(str(root), True)
    (root / "a.txt").write_text("one")
    (root / "sub" / "b.txt").write_text("two")
    (root / "a.txt").rename(root / "c.txt")
    (root / "c.txt").chmod(0o600)
    (root / "c.txt").unlink()
    (root / "made").mkdir()
    seen = await events_until(agent, watch_id, 9)
    kinds = [(e["name"], e["type"]) for e in seen]
    for wanted in [
        ("a.txt", "create"),
        ("a.txt", "write"),
        ("sub/b.txt", "create"),
        ("a.txt", "rename"),
        ("c.txt", "create"),
        ("c.txt", "chmod"),
        ("c.txt", "remove"),
        ("made", "create"),
    ]:
        assert wanted in kinds, (wanted, kinds)
    # A directory made after the watch started is watched too.
    (root / "made" / "inner.txt").write_text("x")
    assert ("made/inner.txt", "create") in [
        (e["name"], e["type"]) for e in await events_until(agent, watch_id, 1)
    ]
    await agent.client.remove_watch(watch_id)
    with pytest.raises(AgentError, match="no watch"):
        await agent.client.watch_events(watch_id)


async def test_a_flat_watch_and_bad_paths(agent: LocalAgent, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    watch_id = await agent.client.create_watch(str(tmp_path), False)
    (tmp_path / "sub" / "deep.txt").write_text("not seen")
    (tmp_path / "top.txt").write_text("seen")
    names = {e["name"] for e in await events_until(agent, watch_id, 1)}
    assert "top.txt" in names and "sub/deep.txt" not in names
    assert (await agent.client.watch_events(watch_id, wait=0))["events"] == []
    with pytest.raises(AgentError, match="No such file"):
        await agent.client.create_watch(str(tmp_path / "missing"), False)
    with pytest.raises(AgentError, match="not a directory"):
        await agent.client.create_watch(str(tmp_path / "top.txt"), False)
    # Removing the watched directory ends the watch.
    await agent.client.remove_watch(watch_id)
    gone = tmp_path / "gone"
    gone.mkdir()
    other = await agent.client.create_watch(str(gone), False)
    gone.rmdir()
    batch = await agent.client.watch_events(other, wait=5.0)
    while not batch["closed"]:
        batch = await agent.client.watch_events(other, wait=5.0)
    await agent.client.remove_watch(other)
