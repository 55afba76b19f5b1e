"""Snapshot records: the disk their images take, summed in SQL, is the sum of their sizes."""

from __future__ import annotations

from pathlib import Path

from corral.storage.db import Database
from corral.storage.records import SnapshotRecord


def snapshot(name: str, size_mib: int) -> SnapshotRecord:
    return SnapshotRecord(
        name=name,
        state="ready",
        kind="memory",
        source_id="sb-source000000",
        template="base",
        cpu=1.0,
        memory_mib=256,
        disk_mib=1024,
        env={},
        image_path=f"/data/snapshots/{name}",
        size_mib=size_mib,
    )


def test_total_mib_is_the_sum_of_every_snapshot_size(tmp_path: Path) -> None:
    db = Database(tmp_path / "corral.db")
    assert db.snapshots.total_mib() == 0
    for name, size in (("a", 3), ("b", 250), ("c", 0)):
        db.snapshots.add(snapshot(name, size))
    assert db.snapshots.total_mib() == sum(s.size_mib for s in db.snapshots.list()) == 253
    db.snapshots.delete("b")
    assert db.snapshots.total_mib() == 3
