"""Every row of the reconcile table (``lifecycle/reconcile.py``), on the fakes: a daemon stops
with a sandbox in the middle of an action, the next one starts and settles it."""

from __future__ import annotations

import shutil
from pathlib import Path

from corral.runtime.base import RuntimeStatus
from corral.service.images import image_complete, seal_image
from corral.service.lifecycle.park import park_paths
from corral.service.model import Operation, SandboxState
from corral.storage import SandboxRecord
from tests.unit.service.fakes import Fakes


async def checkpointed(fakes: Fakes, record: SandboxRecord, *, seal: bool) -> None:
    """What a park that died after its checkpoint leaves: the image written (sealed or not),
    the runtime stopped as checkpointed, the record running/parking."""
    ws = fakes.workspace
    partial, final = park_paths(ws.lifecycle.parked_dir, record.id)
    # As a park does: the operation first, so the monitor's death check leaves it alone.
    ws.db.sandboxes.update(record.id, operation=Operation.PARKING)
    await ws.sandboxes.live.checkpoint(record.id, partial, leave_running=False)
    if seal:
        seal_image(partial, final, root=ws.lifecycle.parked_dir)


async def test_running_and_alive_is_adopted(fakes: Fakes) -> None:
    record = await fakes.running()
    ws = await fakes.stop_daemon()
    await ws.start()
    assert ws.sandboxes.get(record.id).state == "running"
    assert ws.sandboxes.live.client(record.id) is not None


async def test_parking_with_a_sealed_image_settles_parked(fakes: Fakes) -> None:
    record = await fakes.running()
    await checkpointed(fakes, record, seal=True)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert (settled.state, settled.operation, settled.slot_index) == ("parked", None, None)
    assert image_complete(settled.image_path)
    assert (await ws.lifecycle.wake(record.id)).state == "running"


async def test_parking_with_a_written_unsealed_image_is_sealed_and_parked(fakes: Fakes) -> None:
    record = await fakes.running()
    await checkpointed(fakes, record, seal=False)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert settled.state == "parked" and image_complete(settled.image_path)


async def test_parking_without_an_image_while_running_stays_running(fakes: Fakes) -> None:
    record = await fakes.running()
    ws = fakes.workspace
    partial, _ = park_paths(ws.lifecycle.parked_dir, record.id)
    partial.mkdir()
    (partial / "half-written").write_bytes(b"x")
    ws.db.sandboxes.update(record.id, operation=Operation.PARKING)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert (settled.state, settled.operation) == ("running", None)
    assert not partial.exists()


async def test_waking_with_a_live_runtime_settles_running_and_drops_the_image(
    fakes: Fakes,
) -> None:
    record = await fakes.running()
    ws = fakes.workspace
    await ws.lifecycle.park(record.id)
    image = ws.sandboxes.get(record.id).image_path
    assert image is not None
    kept = fakes.settings.data_dir / "kept-image"
    shutil.copytree(image, kept)
    await ws.lifecycle.wake(record.id)
    await ws.lifecycle.wakes.drain()  # its image removed (after the answer)
    # As if the daemon died after the restore, before the record said running/done.
    shutil.copytree(kept, image)
    ws.db.sandboxes.update(record.id, operation=Operation.WAKING, image_path=image)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert (settled.state, settled.operation, settled.image_path) == ("running", None, None)
    assert not image_complete(image)


async def test_waking_restored_but_unrecorded_settles_parked_and_wakes_again(
    fakes: Fakes,
) -> None:
    record = await fakes.running()
    ws = fakes.workspace
    await ws.lifecycle.park(record.id)
    image = ws.sandboxes.get(record.id).image_path
    assert image is not None
    kept = fakes.settings.data_dir / "kept-image"
    shutil.copytree(image, kept)
    await ws.lifecycle.wake(record.id)
    await ws.lifecycle.wakes.drain()  # its image removed (after the answer)
    # As if the daemon died after the restore, before the commit that ends the wake (the one
    # that records its slot): the runtime runs, the record is running/waking with no slot.
    shutil.copytree(kept, image)
    ws.db.sandboxes.update(record.id, operation=Operation.WAKING, image_path=image, slot_index=None)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert (settled.state, settled.operation, settled.slot_index) == ("parked", None, None)
    assert image_complete(settled.image_path)
    assert (await fakes.runtime.info(record.id)).status is RuntimeStatus.MISSING
    woken = await ws.lifecycle.wake(record.id)
    assert (woken.state, woken.image_path) == ("running", None)
    assert woken.slot_index is not None


async def test_every_finished_boot_records_its_slot(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running()
    assert ws.sandboxes.get(record.id).slot_index == ws.sandboxes.live.slot_index_of(record.id)
    await ws.lifecycle.park(record.id)
    woken = await ws.lifecycle.wake(record.id)
    assert woken.slot_index is not None
    assert woken.slot_index == ws.sandboxes.live.slot_index_of(record.id)
    children = await ws.lifecycle.fork(record.id, 2)
    for child in children:
        assert child.slot_index is not None
        assert ws.sandboxes.get(child.id).slot_index == ws.sandboxes.live.slot_index_of(child.id)


async def test_waking_whose_runtime_is_gone_settles_parked(fakes: Fakes) -> None:
    record = await fakes.running()
    ws = fakes.workspace
    await ws.lifecycle.park(record.id)
    await ws.lifecycle.parks.drain()
    ws.db.sandboxes.update(record.id, state=SandboxState.RUNNING, operation=Operation.WAKING)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert (settled.state, settled.operation) == ("parked", None)
    assert image_complete(settled.image_path)


async def test_a_woken_sandboxs_image_left_by_a_stop_is_removed(fakes: Fakes) -> None:
    """A wake removes its image after answering: a stop before then leaves an image no record
    names, which the next start removes; a parked sandbox's image stays."""
    woken, parked = await fakes.running(), await fakes.running()
    ws = fakes.workspace
    for record in (woken, parked):
        await ws.lifecycle.park(record.id)
    await ws.lifecycle.parks.drain()
    image = ws.sandboxes.get(woken.id).image_path
    assert image is not None
    kept = ws.lifecycle.parked_dir / "kept-copy"
    shutil.copytree(image, kept)
    await ws.lifecycle.wake(woken.id)
    await ws.lifecycle.wakes.drain()
    kept.rename(image)  # as if the stop came before the removal
    ws = await fakes.stop_daemon()
    await ws.start()
    assert not Path(image).exists()
    assert ws.sandboxes.get(woken.id).state == "running"
    assert image_complete(ws.sandboxes.get(parked.id).image_path)
    assert (await ws.lifecycle.wake(parked.id)).state == "running"


async def test_creating_is_removed(fakes: Fakes) -> None:
    record = await fakes.running()
    fakes.workspace.db.sandboxes.update(
        record.id, state=SandboxState.CREATING, operation=Operation.CREATING
    )
    ws = await fakes.stop_daemon()
    await ws.start()
    assert ws.db.sandboxes.get(record.id) is None
    assert record.id not in fakes.runtime.sandboxes


async def test_forking_keeps_the_source_and_removes_unfinished_children(fakes: Fakes) -> None:
    source = await fakes.running()
    child = await fakes.running()
    ws = fakes.workspace
    ws.db.sandboxes.update(source.id, operation=Operation.FORKING)
    ws.db.sandboxes.update(
        child.id, state=SandboxState.CREATING, operation=Operation.FORKING, parent_id=source.id
    )
    ws = await fakes.stop_daemon()
    await ws.start()
    assert (ws.sandboxes.get(source.id).state, ws.sandboxes.get(source.id).operation) == (
        "running",
        None,
    )
    assert ws.db.sandboxes.get(child.id) is None


async def test_killing_is_killed(fakes: Fakes) -> None:
    record = await fakes.running()
    fakes.workspace.db.sandboxes.update(record.id, operation=Operation.KILLING)
    ws = await fakes.stop_daemon()
    await ws.start()
    assert ws.sandboxes.get(record.id).state == "killed"
    assert record.id not in fakes.runtime.sandboxes


async def test_parked_without_its_image_is_an_error(fakes: Fakes) -> None:
    record = await fakes.running()
    ws = fakes.workspace
    parked = await ws.lifecycle.park(record.id)
    assert parked.image_path is not None
    shutil.rmtree(parked.image_path)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert settled.state == "error" and "is missing" in (settled.error or "")


async def test_running_whose_runtime_stopped_is_an_error(fakes: Fakes) -> None:
    record = await fakes.running()
    fakes.runtime.crash(record.id)
    ws = await fakes.stop_daemon()
    await ws.start()
    settled = ws.sandboxes.get(record.id)
    assert settled.state == "error"
    assert "its runtime was stopped when the daemon restarted" in (settled.error or "")


async def test_a_runtime_sandbox_no_record_owns_is_removed(fakes: Fakes) -> None:
    record = await fakes.running()
    fakes.workspace.db.sandboxes.delete(record.id)
    ws = await fakes.stop_daemon()
    await ws.start()
    assert (await fakes.runtime.info(record.id)).status is RuntimeStatus.MISSING
