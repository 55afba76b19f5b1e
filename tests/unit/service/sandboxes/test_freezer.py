"""The freezer's rules on the fake runtime: it freezes only what is still idle, a thaw that comes
while a freeze is in flight waits for it and resumes, and a sandbox that cannot be resumed is no
longer counted frozen."""

from __future__ import annotations

import asyncio
from pathlib import Path

from corral.runtime.base import AgentMount, Resources, SandboxSpec
from corral.runtime.fake import FakeRuntime
from corral.service.sandboxes.freezer import Freezer


async def running(runtime: FakeRuntime, sandbox_id: str = "sbx1") -> str:
    await runtime.start(
        SandboxSpec(
            sandbox_id=sandbox_id,
            rootfs=Path("/rootfs"),
            resources=Resources(cpu=1, memory_mib=256, disk_mib=512),
            agent=AgentMount(mounts=(), argv=("/agent",)),
        )
    )
    return sandbox_id


def frozen(runtime: FakeRuntime, sandbox_id: str) -> bool:
    return runtime.sandboxes[sandbox_id].frozen


async def test_freeze_then_thaw() -> None:
    runtime = FakeRuntime()
    freezer = Freezer(runtime)
    sid = await running(runtime)
    assert await freezer.freeze(sid, lambda: True)
    assert freezer.is_frozen(sid) and frozen(runtime, sid)
    assert not await freezer.freeze(sid, lambda: True)  # already frozen: nothing more
    await freezer.thaw(sid)
    assert not freezer.is_frozen(sid) and not frozen(runtime, sid)
    await freezer.thaw(sid)  # thawing a running sandbox does nothing
    assert [verb for verb, _ in runtime.calls].count("thaw") == 1


async def test_a_call_since_the_monitor_looked_keeps_it_running() -> None:
    runtime = FakeRuntime()
    freezer = Freezer(runtime)
    sid = await running(runtime)
    assert not await freezer.freeze(sid, lambda: False)
    assert not freezer.is_frozen(sid) and not frozen(runtime, sid)


async def test_thaw_during_a_freeze_waits_and_resumes() -> None:
    runtime = FakeRuntime()
    freezer = Freezer(runtime)
    sid = await running(runtime)
    freezing_now = asyncio.Event()
    go_on = asyncio.Event()
    real_freeze = runtime.freeze

    async def slow_freeze(sandbox_id: str) -> None:
        freezing_now.set()
        await go_on.wait()
        await real_freeze(sandbox_id)

    runtime.freeze = slow_freeze  # type: ignore[method-assign]
    freezing = asyncio.create_task(freezer.freeze(sid, lambda: True))
    await freezing_now.wait()
    thawing = asyncio.create_task(freezer.thaw(sid))
    await asyncio.sleep(0)
    assert not thawing.done()  # it waits for the freeze in flight
    go_on.set()
    assert await freezing
    await thawing
    assert not freezer.is_frozen(sid) and not frozen(runtime, sid)


async def test_a_sandbox_that_cannot_thaw_is_not_counted_frozen() -> None:
    runtime = FakeRuntime()
    freezer = Freezer(runtime)
    sid = await running(runtime)
    assert await freezer.freeze(sid, lambda: True)
    runtime.fail_next("thaw")
    await freezer.thaw(sid)
    assert not freezer.is_frozen(sid)
    freezer.forget(sid)
