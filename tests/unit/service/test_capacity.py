"""Capacity from the store: the reservations summed in SQL are the model's own sums over the
records, in every state, and the lifecycle monitor reads only what it may act on."""

from __future__ import annotations

from pathlib import Path

from corral.service.capacity import RESERVING_ALL, RESERVING_IMAGE, Reserved, reserved_by
from corral.service.model import LIVE_STATES, SandboxState
from corral.storage import Database, SandboxRecord


def record(n: int, state: str, **fields: object) -> SandboxRecord:
    return SandboxRecord(
        id=f"sb-{n:012d}",
        state=state,
        template="base",
        cpu=0.25 * (n + 1),
        memory_mib=64 * (n + 1),
        disk_mib=32 * (n + 1),
        image_mib=3 * n,
        created_at=float(n + 1),
        **fields,  # type: ignore[arg-type]
    )


def store(tmp_path: Path, records: list[SandboxRecord]) -> Database:
    db = Database(tmp_path / "corral.db")
    for each in records:
        db.sandboxes.add(each)
    return db


def test_the_store_sums_reservations_as_the_model_does(tmp_path: Path) -> None:
    records = [record(n, state) for n, state in enumerate([*SandboxState, *SandboxState])]
    db = store(tmp_path, records)

    summed = Reserved(*db.sandboxes.reserved(RESERVING_ALL, RESERVING_IMAGE))

    assert summed == reserved_by(records)
    assert summed.cpu > 0 and summed.memory_mib > 0 and summed.disk_mib > 0


def test_an_empty_store_reserves_nothing(tmp_path: Path) -> None:
    db = store(tmp_path, [])
    assert Reserved(*db.sandboxes.reserved(RESERVING_ALL, RESERVING_IMAGE)) == Reserved()


def test_the_monitor_reads_running_and_expiring_sandboxes_only(tmp_path: Path) -> None:
    db = store(
        tmp_path,
        [
            record(0, SandboxState.RUNNING),
            record(1, SandboxState.PARKED),
            record(2, SandboxState.PARKED, expires_at=100.0),
            record(3, SandboxState.CREATING, expires_at=100.0),
            record(4, SandboxState.KILLED, expires_at=100.0),
            record(5, SandboxState.RUNNING, expires_at=100.0),
        ],
    )

    watched = db.sandboxes.list_in_or_expiring({SandboxState.RUNNING}, LIVE_STATES)

    assert [r.id for r in watched] == [f"sb-{n:012d}" for n in (0, 2, 3, 5)]
