"""Snapshot records read back exactly as written: the plain-SQL reads and writes give the same
records as the ORM's, for every field, set or left at its default; sizes summed in SQL."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corral.storage.db import Database
from corral.storage.records import SnapshotRecord
from corral.storage.tables import SnapshotRow


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "corral.db")


def snapshot(name: str, size_mib: int = 0) -> SnapshotRecord:
    return SnapshotRecord(
        name=name,
        state="creating",
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


FULL = dataclasses.replace(
    snapshot("full", 17),
    cpu=1.5,
    env={"A": "1", "EMPTY": "", "UNICODE": "é\u2603"},
    created_at=1700000000.25,
    image="sha256:" + "ab" * 32,
    owner="key-owner",
)


def _orm_read(db: Database, name: str) -> SnapshotRecord:
    with db._sessions() as session:
        row = session.get(SnapshotRow, name)
        assert row is not None
        fields = [f.name for f in dataclasses.fields(SnapshotRecord)]
        return SnapshotRecord(**{f: getattr(row, f) for f in fields})


@pytest.mark.parametrize("record", [FULL, snapshot("bare")], ids=["full", "bare"])
def test_a_record_reads_back_as_written_and_as_the_orm_reads_it(
    db: Database, record: SnapshotRecord
) -> None:
    db.snapshots.add(record)
    assert db.snapshots.get(record.name) == record == _orm_read(db, record.name)
    assert db.snapshots.list() == [record]
    assert db.snapshots.get("missing") is None


def test_an_orm_written_record_reads_back_by_sql(db: Database) -> None:
    with db._sessions.begin() as session:
        session.add(SnapshotRow(**dataclasses.asdict(FULL)))
    assert db.snapshots.get(FULL.name) == FULL


def test_update_sets_only_fields_and_answers_the_record_after(db: Database) -> None:
    db.snapshots.add(snapshot("s"))
    after = db.snapshots.update("s", state="ready", size_mib=3)
    assert after == dataclasses.replace(snapshot("s"), state="ready", size_mib=3)
    assert db.snapshots.get("s") == after == _orm_read(db, "s")
    with pytest.raises(KeyError):
        db.snapshots.update("missing", state="ready")
    with pytest.raises(TypeError, match="nonsense"):
        db.snapshots.update("s", nonsense=1)
    with pytest.raises(TypeError, match="name"):
        db.snapshots.update("s", name="renamed")


def test_total_mib_is_the_sum_of_every_snapshot_size(db: Database) -> None:
    assert db.snapshots.total_mib() == 0
    for name, size in (("a", 3), ("b", 250), ("c", 0)):
        db.snapshots.add(dataclasses.replace(snapshot(name, size), created_at=float(size)))
    assert [s.name for s in db.snapshots.list()] == ["c", "a", "b"]  # oldest first
    assert db.snapshots.total_mib() == 253
    db.snapshots.delete("b")
    db.snapshots.delete("missing")
    assert db.snapshots.total_mib() == 3
