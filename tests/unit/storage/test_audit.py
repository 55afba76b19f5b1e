"""The audit log's store: a batch is appended whole or not at all, read back as written, and
the log refuses changes."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy.exc

from corral.storage.db import Database
from corral.storage.records import AuditEntry


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "corral.db")


FULL = AuditEntry(
    at=1700000000.25,
    key_id="k-1",
    key_name="ci é",
    action="exec_command",
    method="POST",
    path="/v1/sandboxes/sb-1/exec",
    target="sb-1",
    status=200,
    result="ok",
    source="127.0.0.1",
    detail="ran \u2603",
)
BARE = AuditEntry(
    at=1700000001.5,
    key_id=None,
    key_name=None,
    action="POST /nowhere",
    method="POST",
    path="/nowhere",
    target=None,
    status=401,
    result="unauthorized",
)


def test_a_batch_reads_back_in_order_with_ids(db: Database) -> None:
    db.audit.append([FULL, BARE])
    db.audit.append([])
    read = db.audit.query()
    assert [dataclasses.replace(e, id=0) for e in read] == [FULL, BARE]
    assert read[0].id < read[1].id
    assert db.audit.query(after_id=read[0].id) == [read[1]]
    assert db.audit.query(key_name="ci é") == [read[0]]


def test_a_batch_with_a_bad_entry_stores_none_of_it(db: Database) -> None:
    db.audit.append([FULL])
    broken = dataclasses.replace(BARE, action=None)  # type: ignore[arg-type]
    with pytest.raises(sqlite3.IntegrityError):
        db.audit.append([BARE, broken])
    assert [dataclasses.replace(e, id=0) for e in db.audit.query()] == [FULL]
    db.audit.append([BARE])  # the connection went back to the pool usable
    assert len(db.audit.query()) == 2


def test_the_log_refuses_updates_and_deletes(db: Database) -> None:
    db.audit.append([FULL])
    with db.engine.begin() as connection:
        for statement in ("UPDATE audit_log SET status = 500", "DELETE FROM audit_log"):
            with pytest.raises(sqlalchemy.exc.DatabaseError):
                connection.exec_driver_sql(statement)
    assert len(db.audit.query()) == 1
