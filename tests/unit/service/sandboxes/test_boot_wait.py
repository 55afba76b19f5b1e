"""Creation under load: a boot that is slow but alive is waited for; one that is stuck, dead or
past the limit fails cleanly, leaving nothing; a create the host cannot take now is refused up
front naming what is short. On the local-agent runtime, whose sandboxes are host processes: a
boot prelude stands in for a sandbox starved or stuck before its agent comes up."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from corral.runtime.agent_client import AgentClient
from corral.runtime.base import AgentMount
from corral.service.errors import CapacityExceeded, OperationFailed
from corral.service.model import CreateRequest
from corral.service.sandboxes.host_room import HostReadings
from corral.service.workspace import Workspace
from tests.unit.conftest import Harness, LocalAgentRuntime, LoopbackNetwork, make_settings
from tests.unit.service.test_sandboxes import run

# Burns CPU (its own process time, so always longer than the wait's window in wall time) and
# then becomes the agent; sleeps without CPU forever; exits before the agent; burns forever.
SLOW = "import os, sys, time\nwhile time.process_time() < 2.0: pass\n" + (
    "os.execv(sys.executable, [sys.executable, '-I', '-S', sys.argv[1]])"
)
STUCK = "import time\ntime.sleep(3600)"
DIES = "raise SystemExit(3)"
BUSY = "while True: pass"


@asynccontextmanager
async def workspace(
    tmp_path: Path, prelude: str | None, **settings: object
) -> AsyncIterator[Harness]:
    runtime = LocalAgentRuntime(boot_prelude=prelude)
    network = LoopbackNetwork()
    config = make_settings(tmp_path, **settings)
    ws = Workspace.build(
        config,
        runtime,
        network,
        AgentMount(mounts=(), argv=()),
        connect_agent=lambda sandbox_id, _slot: AgentClient("127.0.0.1", runtime.ports[sandbox_id]),
    )
    await ws.start()
    try:
        yield Harness(ws, runtime, network, config)
    finally:
        await ws.stop()
        runtime.close()


def assert_nothing_left(h: Harness) -> None:
    assert h.workspace.sandboxes.list() == []
    assert h.network.leased == set()
    assert h.runtime.processes == {}
    assert not list((h.settings.data_dir / "agent-keys").glob("*"))


async def test_slow_but_progressing_boot_is_waited_for(tmp_path: Path) -> None:
    async with workspace(tmp_path, SLOW, agent_ready_timeout=0.5) as h:
        record = await h.workspace.creator.create(CreateRequest())
        assert record.state == "running"
        assert await run(h.workspace, record.id, shell="echo up") == (0, b"up\n")
        await h.workspace.sandboxes.kill(record.id)


@pytest.mark.parametrize(
    ("prelude", "settings", "says"),
    [
        (STUCK, {"agent_ready_timeout": 0.3}, r"its boot is stuck: .* used 0\.\d\d s of CPU"),
        (DIES, {"agent_ready_timeout": 0.3}, r"it is stopped after .* before its agent answered"),
        (
            BUSY,
            {"agent_ready_timeout": 0.3, "agent_ready_limit": 1.0},
            r"did not answer within 1 s \(agent_ready_limit\) although the sandbox kept running",
        ),
    ],
    ids=["stuck", "dies", "past-limit"],
)
async def test_failed_boot_says_why_and_leaves_nothing(
    tmp_path: Path, prelude: str, settings: dict[str, object], says: str
) -> None:
    async with workspace(tmp_path, prelude, **settings) as h:
        with pytest.raises(OperationFailed, match=says):
            await h.workspace.creator.create(CreateRequest())
        assert_nothing_left(h)


def host(**figures: int) -> Callable[[], HostReadings]:
    base = {
        "available_memory_mib": 16384,
        "tasks": 500,
        "task_limit": 100_000,
        "open_fds": 50,
        "fd_limit": 65536,
    }
    readings = HostReadings(**{**base, **figures})
    return lambda: readings


@pytest.mark.parametrize(
    ("figures", "says"),
    [
        ({"available_memory_mib": 500}, r"host is short of memory .* 500 MiB available"),
        ({"tasks": 99_000}, r"host is short of tasks \(pids\) .* 99000 of 100000 in use"),
        ({"open_fds": 1000, "fd_limit": 1024}, r"daemon is short of open files .* 1000 of 1024"),
    ],
    ids=["memory", "tasks", "files"],
)
async def test_create_over_host_capacity_is_refused_up_front(
    harness: Harness, figures: dict[str, int], says: str
) -> None:
    ws = harness.workspace
    ws.admission.host.read = host(**figures)
    with pytest.raises(CapacityExceeded, match=says):
        await ws.creator.create(CreateRequest())
    assert ws.sandboxes.list() == []
    assert harness.runtime.processes == {}
    ws.admission.host.read = host()
    record = await ws.creator.create(CreateRequest())
    assert record.state == "running"
    await ws.sandboxes.kill(record.id)


async def test_host_reserve_is_a_setting_read_from_the_real_host(tmp_path: Path) -> None:
    async with workspace(tmp_path, None, host_reserve_memory_mib=1 << 40) as h:
        with pytest.raises(CapacityExceeded, match=r"host_reserve_memory_mib"):
            await h.workspace.creator.create(CreateRequest())
        assert_nothing_left(h)
