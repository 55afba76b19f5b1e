"""Park, wake and fork in the service, on the fakes: what a caller sees of each."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime.base import RuntimeStatus
from corral.service import images
from corral.service.errors import CapacityExceeded, OperationFailed, StateConflict
from corral.service.images import image_complete
from tests.unit.service.fakes import Fakes


async def test_park_frees_memory_and_wake_restores_the_same_sandbox(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running(memory_mib=512, env={"A": "1"})
    before = ws.admission.capacity().memory.reserved

    parked = await ws.lifecycle.park(record.id)

    assert parked.state == "parked" and parked.slot_index is None
    assert image_complete(parked.image_path)
    assert ws.admission.capacity().memory.reserved == before - 512
    woken = await ws.lifecycle.wake(record.id)
    assert (woken.id, woken.state, woken.image_path) == (record.id, "running", None)
    assert ws.admission.capacity().memory.reserved == before
    assert fakes.runtime.sandboxes[record.id].restored_from is not None
    assert fakes.agents.agents[record.id].rekeyed == 1  # a restored agent gets its own key


async def test_a_park_followed_by_a_wake_and_a_park_leaves_one_teardown(fakes: Fakes) -> None:
    """A wake removes what the park before it left; that park's teardown, due after its grace,
    must not remove the later park's leftovers too (under the lock the next wake waits for)."""
    ws = fakes.workspace
    record = await fakes.running()
    await ws.lifecycle.park(record.id)
    await ws.lifecycle.wake(record.id)
    await ws.lifecycle.park(record.id)
    await ws.lifecycle.parks.drain()  # both teardowns, without their grace
    assert fakes.runtime.calls.count(("cleanup", record.id)) == 1
    assert (await ws.lifecycle.wake(record.id)).state == "running"


async def test_waking_a_running_sandbox_answers_it_as_it_is(fakes: Fakes) -> None:
    record = await fakes.running()
    assert (await fakes.workspace.lifecycle.wake(record.id)).state == "running"
    assert fakes.runtime.sandboxes[record.id].restored_from is None


async def test_a_failed_checkpoint_leaves_the_sandbox_running(fakes: Fakes) -> None:
    record = await fakes.running()
    fakes.runtime.fail_next("checkpoint", "disk on fire")
    with pytest.raises(OperationFailed, match=r"still running: .*disk on fire"):
        await fakes.workspace.lifecycle.park(record.id)
    current = fakes.workspace.sandboxes.get(record.id)
    assert (current.state, current.operation) == ("running", None)


async def test_a_park_that_may_not_fit_on_disk_is_refused_before_anything_changes(
    fakes: Fakes,
) -> None:
    record = await fakes.running()
    fakes.runtime.set_disk_usage(record.id, 10**7)
    with pytest.raises(CapacityExceeded, match=f"cannot park sandbox {record.id}"):
        await fakes.workspace.lifecycle.park(record.id)
    assert fakes.workspace.sandboxes.get(record.id).state == "running"


async def test_auto_wake_wakes_a_parked_sandbox_on_its_first_use(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running(auto_wake=True)
    await ws.lifecycle.park(record.id)
    client = await ws.lifecycle.wakes.ready_agent(record.id, "exec in")
    assert client is ws.sandboxes.live.client(record.id)
    assert ws.sandboxes.get(record.id).state == "running"


async def test_without_auto_wake_a_parked_sandbox_says_wake_it_first(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running()
    await ws.lifecycle.park(record.id)
    with pytest.raises(StateConflict, match="in state parked; wake it first"):
        await ws.lifecycle.wakes.ready_agent(record.id, "exec in")


async def test_fork_makes_children_that_continue_from_the_source(fakes: Fakes) -> None:
    ws = fakes.workspace
    source = await fakes.running(metadata={"team": "a"}, ttl_seconds=600)
    children = await ws.lifecycle.fork(source.id, 2)
    assert len(children) == 2
    for child in children:
        assert (child.state, child.parent_id, child.metadata) == (
            "running",
            source.id,
            {"team": "a"},
        )
        assert child.expires_at is not None
        assert fakes.runtime.sandboxes[child.id].restored_from is not None
    assert (await fakes.runtime.info(source.id)).status is RuntimeStatus.RUNNING
    assert fakes.network.built_ahead == 2  # the children's slots, built during the checkpoint


async def test_only_images_a_restart_may_read_are_made_durable(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A park's and a snapshot's image are fsynced, files and marker together, before they are
    renamed into place (a restart restores from them); a fork's is scratch (the work dir is
    emptied at every start, and a crash ends the fork anyway)."""
    synced: list[tuple[Path, list[str]]] = []
    fsync_tree = images.fsync_tree

    def recording(directory: Path) -> None:
        synced.append((directory, sorted(p.name for p in directory.iterdir())))
        fsync_tree(directory)

    monkeypatch.setattr(images, "fsync_tree", recording)
    ws = fakes.workspace
    record = await fakes.running()
    await ws.lifecycle.fork(record.id, 2)
    assert synced == []
    snapshot = await ws.snapshots.take(record.id, "durable")
    parked = await ws.lifecycle.park(record.id)
    assert [d.name for d, _ in synced] == [
        f"{Path(snapshot.image_path).name}.partial",
        f"{record.id}.partial",
    ]
    assert all(images.IMAGE_COMPLETE in names and len(names) > 1 for _, names in synced)
    assert image_complete(parked.image_path) and image_complete(snapshot.image_path)


async def test_a_fork_that_cannot_restore_every_child_makes_none(fakes: Fakes) -> None:
    ws = fakes.workspace
    source = await fakes.running()
    fakes.runtime.fail_next("restore")
    with pytest.raises(OperationFailed):
        await ws.lifecycle.fork(source.id, 3)
    assert [r.id for r in ws.sandboxes.list()] == [source.id]


async def test_secrets_never_leave_a_sandbox_through_a_fork(fakes: Fakes) -> None:
    source = await fakes.running(secret_env={"TOKEN": "x"})
    with pytest.raises(StateConflict, match="holds secrets"):
        await fakes.workspace.lifecycle.fork(source.id, 1)
