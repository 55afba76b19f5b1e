"""Sandbox lifecycle in the service, on the local-agent runtime and loopback network."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time

import pytest

from corral.service.errors import (
    CapacityExceeded,
    ExecFailed,
    InvalidRequest,
    NotFound,
    OperationFailed,
    StateConflict,
)
from corral.service.model import CreateRequest, ExecSpec, new_sandbox_id
from corral.service.workspace import Workspace
from tests.unit.conftest import Harness


async def run(
    ws: Workspace, sandbox_id: str, *, cmd: list[str] | None = None, shell: str | None = None
) -> tuple[int | None, bytes]:
    """Exec as the API does (its body's defaults: no env, stdin closed)."""
    body = ExecSpec(cmd=cmd, shell=shell, env={}, stdin=False)
    out = b""
    code = None
    async for event in await ws.processes.exec_stream(sandbox_id, body):
        if event["type"] == "stdout":
            out += base64.b64decode(event["data"])
        if event["type"] == "exit":
            code = event["exit_code"]
    return code, out


def test_ids_are_fixed_width() -> None:
    assert len({len(new_sandbox_id()) for _ in range(200)}) == 1


async def test_create_exec_kill_frees_capacity(harness: Harness) -> None:
    ws = harness.workspace
    before = ws.admission.capacity()
    record = await ws.creator.create(CreateRequest(memory_mib=300, cpu=1.5, env={"A": "b"}))
    assert record.state == "running"
    during = ws.admission.capacity()
    assert during.memory.reserved == before.memory.reserved + 300
    assert during.cpu.reserved == before.cpu.reserved + 1.5
    assert await run(ws, record.id, shell="echo $A") == (0, b"b\n")
    await ws.sandboxes.kill(record.id)
    assert ws.sandboxes.get(record.id).state == "killed"
    assert ws.admission.capacity().memory.reserved == before.memory.reserved
    assert harness.network.leased == set()
    await ws.sandboxes.kill(record.id)  # idempotent
    with pytest.raises(StateConflict, match="killed"):
        await run(ws, record.id, cmd=["true"])


async def test_invalid_requests_name_the_limit(harness: Harness) -> None:
    ws = harness.workspace
    with pytest.raises(InvalidRequest, match=r"memory 4000 MiB is outside 64\.\.2048"):
        await ws.creator.create(CreateRequest(memory_mib=4000))
    with pytest.raises(InvalidRequest, match="cpu"):
        await ws.creator.create(CreateRequest(cpu=100))
    with pytest.raises(NotFound, match="template 'nope'"):
        await ws.creator.create(CreateRequest(template="nope"))
    assert ws.sandboxes.list() == []


async def test_capacity_refusal_says_by_how_much(harness: Harness) -> None:
    ws = harness.workspace
    a = await ws.creator.create(CreateRequest(memory_mib=2048))
    b = await ws.creator.create(CreateRequest(memory_mib=1500))
    with pytest.raises(CapacityExceeded, match=r"asked for 1000 MiB, 548 of 4096 MiB free"):
        await ws.creator.create(CreateRequest(memory_mib=1000))
    assert len(ws.sandboxes.list()) == 2
    await ws.sandboxes.kill(a.id)
    await ws.sandboxes.kill(b.id)


async def test_concurrent_creates_never_overcommit_memory(harness: Harness) -> None:
    ws = harness.workspace
    results = await asyncio.gather(
        *(ws.creator.create(CreateRequest(memory_mib=1000)) for _ in range(6)),
        return_exceptions=True,
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, CapacityExceeded)]
    assert len(made) == 4 and len(refused) == 2
    for record in made:
        await ws.sandboxes.kill(record.id)


async def test_failed_create_leaves_nothing(harness: Harness) -> None:
    harness.runtime.fail_start = True
    with pytest.raises(OperationFailed, match="injected failure"):
        await harness.workspace.creator.create(CreateRequest())
    assert harness.workspace.sandboxes.list() == []
    assert harness.network.leased == set()
    assert harness.runtime.processes == {}


async def test_dead_runtime_is_reported_not_running(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(CreateRequest(memory_mib=128))
    harness.runtime.crash(record.id, oom=True)
    refreshed = await ws.sandboxes.refresh(record.id)
    assert refreshed.state == "error"
    assert "out of memory" in (refreshed.error or "") and "128 MiB" in (refreshed.error or "")
    assert ws.admission.capacity().memory.reserved == 0
    with pytest.raises(StateConflict, match="error"):
        await run(ws, record.id, cmd=["true"])


async def test_exec_of_missing_program(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(CreateRequest())
    with pytest.raises(ExecFailed, match="no-such-program"):
        await run(ws, record.id, cmd=["no-such-program"])
    with pytest.raises(InvalidRequest):
        await run(ws, record.id)
    await ws.sandboxes.kill(record.id)


async def test_ttl_kills(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(CreateRequest(ttl_seconds=1))
    deadline = time.monotonic() + 10
    while ws.sandboxes.get(record.id).state != "killed" and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert ws.sandboxes.get(record.id).state == "killed"


async def test_restart_readopts_and_cleans_interrupted(harness: Harness) -> None:
    ws = harness.workspace
    alive = await ws.creator.create(CreateRequest())
    dead = await ws.creator.create(CreateRequest())
    await ws.lifecycle.stop()
    harness.runtime.crash(dead.id)
    # A create interrupted by a crash: record in 'creating' with a runtime left behind.
    ws.db.sandboxes.update(alive.id, state="running")
    fresh = Workspace.build(
        harness.settings,
        harness.runtime,
        harness.network,
        ws.sandboxes.live.agent_mount,
        connect_agent=ws.sandboxes.live.connect_agent,
    )
    from corral.storage import SandboxRecord

    fresh.db.sandboxes.add(
        SandboxRecord(
            id="sb-interrupted0",
            state="creating",
            template="base",
            cpu=1,
            memory_mib=64,
            disk_mib=64,
            operation="creating",
        )
    )
    await fresh.start()
    try:
        assert fresh.sandboxes.get(alive.id).state == "running"
        assert await run(fresh, alive.id, cmd=["echo", "back"]) == (0, b"back\n")
        assert fresh.sandboxes.get(dead.id).state == "error"
        with pytest.raises(NotFound):
            fresh.sandboxes.get("sb-interrupted0")
    finally:
        await fresh.sandboxes.kill(alive.id)
        await fresh.stop()


async def test_secret_env_reaches_processes_but_not_the_boot_config(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(
        CreateRequest(env={"PLAIN": "p"}, secret_env={"TOKEN": "very-secret"})
    )
    spec = harness.runtime.specs[record.id]
    assert ("TOKEN", "very-secret") not in spec.agent.env  # never in the OCI config
    assert ("PLAIN", "p") in spec.agent.env
    assert await run(ws, record.id, shell="echo $TOKEN $PLAIN") == (0, b"very-secret p\n")
    key_file = harness.settings.data_dir / "agent-keys" / record.id
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    await ws.sandboxes.kill(record.id)
    assert not key_file.exists()


async def test_adopting_after_a_wake_cut_before_its_rekey_finishes_the_rekey(
    harness: Harness,
) -> None:
    ws = harness.workspace
    record = await ws.creator.create(CreateRequest())
    image_key = ws.sandboxes.live.keys.get(record.id)
    assert image_key is not None
    await ws.sandboxes.live.detach(record.id)  # as a daemon stop leaves it: the agent runs on
    new_key = ws.sandboxes.live.keys.issue(record.id)  # persisted, but the agent was never told
    assert new_key != image_key
    assert await ws.sandboxes.live.adopt(ws.sandboxes.get(record.id), image_key)
    client = ws.sandboxes.agent(record.id, "exec")
    assert "boot_id" in await client.health()  # the agent now takes the persisted key
    assert await run(ws, record.id, shell="echo ok") == (0, b"ok\n")


async def test_list_shows_live_sandboxes_unless_all_and_prunes_ended(harness: Harness) -> None:
    ws = harness.workspace
    live = await ws.creator.create(CreateRequest(memory_mib=128))
    gone = await ws.creator.create(CreateRequest(memory_mib=128))
    await ws.sandboxes.kill(gone.id)
    assert [r.id for r in ws.sandboxes.list()] == [live.id]
    assert {r.id for r in ws.sandboxes.list(include_ended=True)} == {live.id, gone.id}
    assert [r.id for r in ws.sandboxes.list(states=["killed"])] == [gone.id]
    retention = ws.settings.ended_retention_seconds
    assert ws.sandboxes.prune_ended(time.time()) == []  # still within the retention
    assert ws.sandboxes.prune_ended(time.time() + retention + 1) == [gone.id]
    with pytest.raises(NotFound):
        ws.sandboxes.get(gone.id)
    assert ws.sandboxes.get(live.id).state == "running"  # live ones are never pruned
    await ws.sandboxes.kill(live.id)


async def test_exec_timeout_holds_when_the_agent_cannot_enforce_it(harness: Harness) -> None:
    """A starved agent (here: stopped) cannot end a process at its timeout; the daemon ends the
    caller's stream at timeout + grace with ``timed_out`` and a reason, and kills the process
    once the agent answers again."""
    ws = harness.workspace
    harness.settings.exec_timeout_grace_seconds = 0.3
    record = await ws.creator.create(CreateRequest())
    agent = harness.runtime.processes[record.id]
    body = ExecSpec(cmd=["sleep", "60"], env={}, stdin=False, timeout=2)
    events = []
    try:
        # Bounded so that a daemon without the backstop fails here instead of hanging (the
        # stopped agent never ends the stream itself).
        async with asyncio.timeout(60):
            async for event in await ws.processes.exec_stream(record.id, body):
                if event["type"] == "start":
                    os.kill(agent.pid, signal.SIGSTOP)  # the agent's own timer cannot fire now
                events.append(event)
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    start, end = events[0], events[-1]
    assert end["type"] == "exit" and end["timed_out"] is True and end["exit_code"] is None
    assert end["seq"] > start["seq"]
    assert record.id in end["error"] and "timeout" in end["error"]

    # The agent, running again, gets the daemon's kill (or fires its own timer): `sleep 60`
    # (a host process under this test's local agent) ends long before its 60 s.
    try:
        pidfd = os.pidfd_open(start["pid"])
    except ProcessLookupError:
        pidfd = None  # ended already
    if pidfd is not None:
        ended = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(pidfd, ended.set)
        try:
            await asyncio.wait_for(ended.wait(), 30)
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
    await ws.sandboxes.kill(record.id)
