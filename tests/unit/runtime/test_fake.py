from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime import (
    AgentMount,
    FakeRuntime,
    Resources,
    RuntimeFailure,
    RuntimeStatus,
    SandboxSpec,
)


def spec(sandbox_id: str = "sbx1") -> SandboxSpec:
    return SandboxSpec(
        sandbox_id=sandbox_id,
        rootfs=Path("/rootfs"),
        resources=Resources(cpu=1, memory_mib=256, disk_mib=512),
        agent=AgentMount(mounts=(), argv=("/agent",)),
    )


async def test_lifecycle() -> None:
    rt = FakeRuntime()
    assert (await rt.info("sbx1")).status is RuntimeStatus.MISSING
    await rt.start(spec())
    assert (await rt.info("sbx1")).status is RuntimeStatus.RUNNING
    await rt.pause("sbx1")
    assert (await rt.info("sbx1")).status is RuntimeStatus.PAUSED
    with pytest.raises(RuntimeFailure, match="cannot pause sandbox sbx1 in state paused"):
        await rt.pause("sbx1")
    await rt.resume("sbx1")
    assert await rt.list_ids() == ["sbx1"]
    await rt.destroy("sbx1")
    await rt.destroy("sbx1")
    assert (await rt.info("sbx1")).status is RuntimeStatus.MISSING


async def test_start_twice_is_refused() -> None:
    rt = FakeRuntime()
    await rt.start(spec())
    with pytest.raises(RuntimeFailure, match="already exists"):
        await rt.start(spec())


async def test_park_and_wake_through_an_image(tmp_path: Path) -> None:
    rt = FakeRuntime()
    await rt.start(spec())
    rt.set_disk_usage("sbx1", 7)
    await rt.checkpoint("sbx1", tmp_path / "img", leave_running=False)
    info = await rt.info("sbx1")
    assert (info.status, info.detail) == (RuntimeStatus.STOPPED, "checkpointed")
    with pytest.raises(RuntimeFailure, match="cannot checkpoint"):
        await rt.checkpoint("sbx1", tmp_path / "img2", leave_running=False)
    await rt.restore(spec(), tmp_path / "img")
    assert (await rt.info("sbx1")).status is RuntimeStatus.RUNNING
    assert rt.sandboxes["sbx1"].generation == 2
    assert await rt.disk_usage_mib("sbx1") == 7


async def test_fork_keeps_the_parent_running(tmp_path: Path) -> None:
    rt = FakeRuntime()
    await rt.start(spec("parent"))
    await rt.checkpoint("parent", tmp_path / "img", leave_running=True)
    await rt.restore(spec("child"), tmp_path / "img")
    assert (await rt.info("parent")).status is RuntimeStatus.RUNNING
    assert (await rt.info("child")).status is RuntimeStatus.RUNNING


async def test_restore_without_image_fails(tmp_path: Path) -> None:
    rt = FakeRuntime()
    with pytest.raises(RuntimeFailure, match="restoring sandbox sbx1: no checkpoint image"):
        await rt.restore(spec(), tmp_path)
    assert await rt.list_ids() == []


async def test_injected_failure_and_crash() -> None:
    rt = FakeRuntime()
    rt.fail_next("start", "no space")
    with pytest.raises(RuntimeFailure, match="starting sandbox sbx1: no space"):
        await rt.start(spec())
    assert await rt.list_ids() == []
    await rt.start(spec())
    rt.crash("sbx1", oom=True)
    info = await rt.info("sbx1")
    assert info.status is RuntimeStatus.STOPPED and info.oom_killed
    assert ("start", "sbx1") in rt.calls
