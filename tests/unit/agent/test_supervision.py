"""Supervised processes (``"restart": true``, a recipe's server): started again when they exit."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from tests.unit.agent.conftest import LocalAgent


async def _wait_for(condition, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_supervised_process_is_restarted_until_signalled_through_the_api(
    agent: LocalAgent, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    first = await agent.client.start_process(
        {"shell": f"echo run >> {runs}; exec sleep 1000", "restart": True, "tag": "server"}
    )

    async def servers() -> list[dict]:  # type: ignore[type-arg]
        return [p for p in await agent.client.list_processes() if p["tag"] == "server"]

    async def started_twice() -> bool:
        running = [p for p in await servers() if p["running"]]
        return runs.exists() and runs.read_text().count("run") == 2 and len(running) == 1

    async def started_once() -> bool:
        return runs.exists() and runs.read_text().count("run") == 1

    await _wait_for(started_once, "the first start")
    os.kill(first, signal.SIGKILL)  # a crash: not through the API
    await _wait_for(started_twice, "the restart after a crash")
    running = [p for p in await servers() if p["running"]]
    assert running[0]["pid"] != first
    assert running[0]["cmd"] == ["/bin/sh", "-c", f"echo run >> {runs}; exec sleep 1000"]

    await agent.client.signal(running[0]["pid"], "SIGTERM")  # asked for: it stays stopped

    async def none_running() -> bool:
        return not any(p["running"] for p in await servers())

    await _wait_for(none_running, "the signalled server to end")


async def test_processes_without_restart_are_not_restarted(
    agent: LocalAgent, tmp_path: Path
) -> None:
    marker = tmp_path / "once"
    pid = await agent.client.start_process({"shell": f"echo once >> {marker}"})
    events = [e async for e in agent.client.events(pid)]
    assert events[-1]["exit_code"] == 0
    listed = await agent.client.list_processes()
    assert [p["pid"] for p in listed if p["cmd"][-1].startswith("echo once")] == [pid]
