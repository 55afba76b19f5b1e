"""A boot sets up its slot beside the runtime's own preparation (``LiveSandboxes._run``): the
sandbox still runs only once its slot is ready (a cold boot's only once its inner address is,
its egress being attached beside runsc and before anyone is told of the sandbox), a failure on
either side leaves nothing, and a slot is never released while its set-up is still running."""

from __future__ import annotations

import asyncio

import pytest

from corral.network.base import NetworkFailure, Slot
from corral.service.errors import OperationFailed
from corral.service.model import CreateRequest
from tests.unit.service.fakes import Fakes


def nothing_left(fakes: Fakes) -> bool:
    return (
        not fakes.network.leased
        and not fakes.runtime.sandboxes
        and not fakes.workspace.db.sandboxes.list(states=None)
    )


async def test_the_sandbox_runs_only_once_its_slot_is_ready(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    prepare = fakes.network.prepare

    async def slow_prepare(slot: Slot) -> None:
        await asyncio.sleep(0)  # the runtime gets to run first
        restored = [s.restored_from is not None for s in fakes.runtime.sandboxes.values()]
        seen.append(f"prepared; sandboxes restored: {restored}")
        await prepare(slot)

    monkeypatch.setattr(fakes.network, "prepare", slow_prepare)
    record = await fakes.running()
    assert seen == ["prepared; sandboxes restored: []"]  # none started yet
    assert fakes.network.prepared[fakes.workspace.sandboxes.live.slot_index_of(record.id)] == 1
    parked = await fakes.workspace.lifecycle.park(record.id)
    seen.clear()
    await fakes.workspace.lifecycle.wake(parked.id)
    assert seen == ["prepared; sandboxes restored: [False]"]  # the parked one, not yet restored
    assert fakes.runtime.sandboxes[record.id].restored_from is not None


async def test_a_slot_that_fails_to_set_up_fails_the_boot_and_leaves_nothing(
    fakes: Fakes,
) -> None:
    fakes.network.fail_next("prepare", NetworkFailure("no route to the moon"))
    with pytest.raises(OperationFailed, match="no route to the moon"):
        await fakes.workspace.creator.create(CreateRequest())
    assert nothing_left(fakes)


async def test_a_failed_runtime_waits_for_the_slot_set_up_before_releasing_it(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = asyncio.Event()
    released_while_preparing: list[bool] = []
    prepare, release = fakes.network.prepare, fakes.network.release
    preparing = False

    async def gated_prepare(slot: Slot) -> None:
        nonlocal preparing
        preparing = True
        await gate.wait()
        await prepare(slot)
        preparing = False

    async def watched_release(slot: Slot) -> None:
        released_while_preparing.append(preparing)
        await release(slot)

    monkeypatch.setattr(fakes.network, "prepare", gated_prepare)
    monkeypatch.setattr(fakes.network, "release", watched_release)
    fakes.runtime.fail_next("start", "disk on fire")
    create = asyncio.create_task(fakes.workspace.creator.create(CreateRequest()))
    while not preparing:
        await asyncio.sleep(0)
    for _ in range(20):  # the runtime has failed by now; the boot must still wait
        await asyncio.sleep(0)
    assert not create.done()
    gate.set()
    with pytest.raises(OperationFailed, match="disk on fire"):
        await create
    assert released_while_preparing == [False]
    assert nothing_left(fakes)


def gate_egress(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, list[str]]:
    """Hold every egress attach until the gate opens; ``seen`` notes, at each attach's start,
    which sandboxes the runtime has started (cold) or restored (restored)."""
    gate = asyncio.Event()
    seen: list[str] = []
    egress = fakes.workspace.sandboxes.live.policies.egress
    attach = egress.attach

    async def gated_attach(*args: object, **kwargs: object) -> None:
        seen.append(
            ",".join(
                "restored" if s.restored_from is not None else "cold"
                for s in fakes.runtime.sandboxes.values()
            )
            or "none"
        )
        await gate.wait()
        await attach(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(egress, "attach", gated_attach)
    return gate, seen


async def test_a_cold_boot_runs_beside_its_egress_and_answers_only_once_it_is_attached(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, seen = gate_egress(fakes, monkeypatch)
    create = asyncio.create_task(fakes.workspace.creator.create(CreateRequest()))
    for _ in range(50):
        await asyncio.sleep(0)
    assert fakes.runtime.sandboxes  # the runtime started while the egress is held
    assert not create.done()  # nobody is told of a sandbox whose egress is not attached
    (sandbox_id,) = fakes.runtime.sandboxes
    assert fakes.agents.agents.get(sandbox_id) is None  # nor is its agent asked anything
    gate.set()
    record = await create
    assert record.state == "running"
    assert fakes.workspace.sandboxes.live.policies.egress.attached(record.id)
    # A restore's processes run at once: its runtime waits for the egress.
    parked = await fakes.workspace.lifecycle.park(record.id)
    gate.clear()
    seen.clear()
    wake = asyncio.create_task(fakes.workspace.lifecycle.wake(parked.id))
    while not seen:
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert fakes.runtime.sandboxes[record.id].restored_from is None  # not restored yet
    gate.set()
    await wake
    assert fakes.runtime.sandboxes[record.id].restored_from is not None


async def test_an_egress_that_fails_after_the_runtime_started_leaves_nothing(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, _ = gate_egress(fakes, monkeypatch)
    egress = fakes.workspace.sandboxes.live.policies.egress
    held = egress.attach

    async def failing_attach(*args: object, **kwargs: object) -> None:
        await held(*args, **kwargs)
        raise NetworkFailure("nft on fire")

    monkeypatch.setattr(egress, "attach", failing_attach)
    create = asyncio.create_task(fakes.workspace.creator.create(CreateRequest()))
    for _ in range(50):
        await asyncio.sleep(0)
    assert fakes.runtime.sandboxes
    gate.set()
    with pytest.raises(OperationFailed, match="nft on fire"):
        await create
    assert nothing_left(fakes)
