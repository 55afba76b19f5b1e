"""Network traffic in a sandbox's metrics: counted since creation, over park/wake and a daemon
restart; a fork starts at zero."""

from __future__ import annotations

from corral.network.base import Traffic
from tests.unit.service.fakes import Fakes


def _moved(fakes: Fakes, sandbox_id: str, rx: int, tx: int) -> None:
    slot = fakes.workspace.sandboxes.live.slot(sandbox_id)
    assert slot is not None
    fakes.network.add_traffic(slot, Traffic(rx, rx // 1000 + 1, tx, tx // 1000 + 1))


async def _totals(fakes: Fakes, sandbox_id: str) -> tuple[int, int, int, int]:
    s = await fakes.workspace.metrics.sample(sandbox_id)
    return (s.net_rx_bytes, s.net_rx_packets, s.net_tx_bytes, s.net_tx_packets)


async def test_a_new_sandbox_has_moved_nothing(fakes: Fakes) -> None:
    record = await fakes.running()
    assert await _totals(fakes, record.id) == (0, 0, 0, 0)


async def test_traffic_adds_up_over_park_and_wake(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running()
    _moved(fakes, record.id, rx=5000, tx=700)
    assert await _totals(fakes, record.id) == (5000, 6, 700, 1)

    parked = await ws.lifecycle.park(record.id)
    assert (parked.net_rx_bytes, parked.net_tx_bytes) == (5000, 700)
    await ws.lifecycle.wake(record.id)
    assert await _totals(fakes, record.id) == (5000, 6, 700, 1)  # the new slot starts at zero
    _moved(fakes, record.id, rx=2000, tx=300)
    assert await _totals(fakes, record.id) == (7000, 9, 1000, 2)

    await ws.lifecycle.park(record.id)
    await ws.lifecycle.wake(record.id)
    assert await _totals(fakes, record.id) == (7000, 9, 1000, 2)


async def test_a_daemon_restart_keeps_the_live_slots_counts(fakes: Fakes) -> None:
    record = await fakes.running()
    _moved(fakes, record.id, rx=4096, tx=1024)
    ws = await fakes.stop_daemon()
    await ws.start()
    assert await _totals(fakes, record.id) == (4096, 5, 1024, 2)


async def test_forks_start_at_zero_and_the_source_keeps_its_own(fakes: Fakes) -> None:
    ws = fakes.workspace
    source = await fakes.running()
    _moved(fakes, source.id, rx=9000, tx=100)
    children = await ws.lifecycle.fork(source.id, 2)
    for child in children:
        assert await _totals(fakes, child.id) == (0, 0, 0, 0)
    assert await _totals(fakes, source.id) == (9000, 10, 100, 1)


async def test_a_slot_that_cannot_tell_leaves_the_recorded_totals(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running()
    _moved(fakes, record.id, rx=300, tx=30)
    await ws.lifecycle.park(record.id)
    await ws.lifecycle.wake(record.id)
    fakes.network.fail_next("traffic")
    assert await _totals(fakes, record.id) == (300, 1, 30, 1)
