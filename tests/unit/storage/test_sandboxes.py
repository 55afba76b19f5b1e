"""Sandbox records read back exactly as written: the plain-SQL reads (``get``, ``list``) give
the same records as the ORM's, for every field, set or left at its default."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from corral.service.capacity import RESERVING_ALL, RESERVING_IMAGE, Reserved, reserved_by
from corral.storage import sandboxes
from corral.storage.db import Database
from corral.storage.records import SandboxRecord, TemplatePin
from corral.storage.tables import SandboxRow


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "corral.db")


def _orm_read(db: Database, sandbox_id: str) -> SandboxRecord:
    with db._sessions() as session:
        row = session.get(SandboxRow, sandbox_id)
        assert row is not None
        return sandboxes._record(row)


FULL = SandboxRecord(
    id="sb-full00000000",
    state="parked",
    template="py",
    cpu=1.5,
    memory_mib=512,
    disk_mib=2048,
    env={"A": "1", "EMPTY": "", "UNICODE": "é\u2603"},
    metadata={"team": "x", "k": "v"},
    created_at=1700000000.25,
    expires_at=1700003600.5,
    error="it broke",
    slot_index=7,
    operation="parking",
    secret_keys=["TOKEN", "OTHER"],
    on_timeout="park",
    auto_park_idle=300,
    auto_wake=True,
    image_path="/var/lib/corral/parked/sb-full00000000",
    image_mib=12,
    parent_id="sb-parent000000",
    last_active_at=1700000100.75,
    pooled=True,
    network='{"mode": "project"}',
    owner="key-123",
    net_rx_bytes=10,
    net_rx_packets=2,
    net_tx_bytes=30,
    net_tx_packets=4,
)
BARE = SandboxRecord(
    id="sb-bare00000000", state="running", template="base", cpu=1, memory_mib=256, disk_mib=1024
)


@pytest.mark.parametrize("record", [FULL, BARE], ids=["every-field", "defaults"])
def test_get_reads_back_what_was_added_as_the_orm_does(db: Database, record: SandboxRecord) -> None:
    db.sandboxes.add(record)
    read = db.sandboxes.get(record.id)
    assert read == _orm_read(db, record.id)
    assert read is not None
    assert dataclasses.replace(read, updated_at=0.0, created_at=record.created_at) == record
    assert isinstance(read.cpu, float) and isinstance(read.auto_wake, bool)
    assert db.sandboxes.get("sb-missing00000") is None


def test_get_sees_updates_as_the_orm_does(db: Database) -> None:
    db.sandboxes.add(BARE)
    db.sandboxes.update(BARE.id, env={}, metadata={"m": "1"}, secret_keys=[], expires_at=None)
    db.sandboxes.update(BARE.id, pooled=False, auto_wake=False, last_active_at=5.0)
    assert db.sandboxes.get(BARE.id) == _orm_read(db, BARE.id)


def test_list_filters_by_state_pool_and_metadata_oldest_first(db: Database) -> None:
    variants: list[dict[str, Any]] = [
        {"state": "running", "metadata": {"a": "1"}},
        {"state": "parked", "metadata": {"a": "1"}},
        {"state": "running", "pooled": True, "template": "py"},
        {"state": "killed"},
        {"state": "running", "pooled": True, "template": "base"},
    ]
    made = [
        dataclasses.replace(BARE, id=f"sb-list0000000{i}", created_at=100.0 - i, **fields)
        for i, fields in enumerate(variants)
    ]
    for record in made:
        db.sandboxes.add(record)
    ids = lambda records: [r.id for r in records]  # noqa: E731
    assert ids(db.sandboxes.list()) == ids(sorted(made, key=lambda r: r.created_at))
    assert ids(db.sandboxes.list(states={"running", "parked"})) == [
        made[4].id, made[2].id, made[1].id, made[0].id
    ]  # fmt: skip
    assert ids(db.sandboxes.list(states={"running"}, pooled_in="py")) == [made[2].id]
    assert ids(db.sandboxes.list(pooled_in="base")) == [made[4].id]
    assert ids(db.sandboxes.list(metadata={"a": "1"})) == [made[1].id, made[0].id]
    assert db.sandboxes.list(states={"running"}) == [_orm_read(db, i) for i in
        (made[4].id, made[2].id, made[0].id)]  # fmt: skip


def test_reserved_sums_in_sql_what_reserved_by_sums_of_the_records(db: Database) -> None:
    variants: list[dict[str, Any]] = [
        {"state": "running", "cpu": 1.5, "memory_mib": 512, "disk_mib": 1024},
        {"state": "creating", "cpu": 0.25, "memory_mib": 256, "disk_mib": 2048},
        {"state": "parked", "cpu": 2.0, "memory_mib": 1024, "disk_mib": 4096, "image_mib": 37},
        {"state": "parked", "cpu": 2.0, "memory_mib": 1024, "disk_mib": 4096},
        {"state": "killed", "cpu": 4.0, "memory_mib": 4096, "disk_mib": 8192, "image_mib": 5},
    ]
    made = [
        dataclasses.replace(BARE, id=f"sb-resv0000000{i}", **fields)
        for i, fields in enumerate(variants)
    ]
    for record in made:
        db.sandboxes.add(record)
    assert db.sandboxes.reserved(RESERVING_ALL, RESERVING_IMAGE) == (1.75, 768.0, 3109.0)
    assert Reserved(*db.sandboxes.reserved(RESERVING_ALL, RESERVING_IMAGE)) == reserved_by(made)
    assert db.sandboxes.reserved(set(), set()) == (0.0, 0.0, 0.0)


def test_update_tells_listeners_before_and_after_and_refuses_what_is_not_a_field(
    tmp_path: Path,
) -> None:
    seen: list[tuple[SandboxRecord | None, SandboxRecord]] = []
    db = Database(
        tmp_path / "told.db", on_sandbox_change=lambda before, after: seen.append((before, after))
    )
    db.sandboxes.add(BARE)
    after = db.sandboxes.update(BARE.id, state="parked", operation=None, metadata={"k": "v"})
    assert after == db.sandboxes.get(BARE.id) == _orm_read(db, BARE.id)
    assert (after.state, after.metadata) == ("parked", {"k": "v"})
    assert seen[-1][0] is not None and seen[-1][0].state == "running"
    assert seen[-1][1] == after
    with pytest.raises(KeyError):
        db.sandboxes.update("sb-missing00000", state="parked")
    with pytest.raises(TypeError, match="not sandbox record fields: meta"):
        db.sandboxes.update(BARE.id, meta={})
    assert db.sandboxes.get(BARE.id) == after


def test_records_and_their_pins_are_added_in_one_commit(db: Database) -> None:
    """A new sandbox's record and its pin commit together: both, or (the insert refused)
    neither."""
    record = dataclasses.replace(FULL, id="sb-pinned000000", state="creating")
    pin = TemplatePin(record.id, "py", "sha256:" + "ab" * 32, "/srv", "app")
    db.sandboxes.add_all([record], [pin])
    assert db.sandboxes.get(record.id).template == "py"
    assert db.templates.get_pin(record.id) == pin
    again = dataclasses.replace(record, id="sb-again0000000")
    with pytest.raises(IntegrityError):  # the first record once more: the commit fails
        db.sandboxes.add_all([record, again], [TemplatePin(again.id, "py", "base")])
    assert db.templates.get_pin(again.id) is None
