"""The steps park, wake, fork and snapshot mark on their path (``corral.timing``), as the
``Server-Timing`` header and ``bench/lifecycle.py --breakdown`` report them."""

from __future__ import annotations

from corral.timing import Phases, collecting
from tests.unit.service.fakes import Fakes


def names(phases: Phases) -> set[str]:
    return {name for name, _ms, _count in phases.items()}


async def test_park_wake_fork_and_snapshot_mark_their_steps(fakes: Fakes) -> None:
    ws = fakes.workspace
    record = await fakes.running()
    with collecting() as park:
        await ws.lifecycle.park(record.id)
    assert {"admit", "space check", "agent key", "image seal", "db commit"} <= names(park)
    with collecting() as wake:
        await ws.lifecycle.wake(record.id)
    assert {"admit", "slot lease", "agent rekey", "db commit"} <= names(wake)
    assert "agent ready" not in names(wake)  # the rekey is the restored agent's readiness check
    with collecting() as fork:
        await ws.lifecycle.fork(record.id, 3)
    counts = {name: count for name, _ms, count in fork.items()}
    assert counts["slot lease"] == 3 and counts["agent rekey"] == 3
    with collecting() as snapshot:
        await ws.snapshots.take(record.id, "phases")
    assert {"space check", "agent key", "image seal"} <= names(snapshot)
