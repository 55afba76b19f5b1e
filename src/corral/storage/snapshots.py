"""Snapshot records, read and written by plain SQL (``raw.py``).

A snapshot's take and restore read and write its record on the event loop while the caller
waits: through the ORM an insert cost ~3.8 ms, an update ~3.9 and a read ~1.2 at load 9, about
ten times the same statements by SQL (whose durable commit is the same). The decoding matches
the ORM's column types: ``env`` is JSON text.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.raw import fetch_all, json_or, transaction
from corral.storage.records import SnapshotRecord
from corral.storage.tables import SnapshotRow

_FIELDS = [f.name for f in dataclasses.fields(SnapshotRecord)]
_TABLE = SnapshotRow.__tablename__
_COLUMNS = ", ".join(_FIELDS)
_TOTAL_MIB = f"SELECT COALESCE(SUM(size_mib), 0) FROM {_TABLE}"


def _to_sql(name: str, value: Any) -> Any:
    return json.dumps(value) if name == "env" else value


def _from_sql(row: tuple[Any, ...]) -> SnapshotRecord:
    fields = dict(zip(_FIELDS, row, strict=True))
    fields["env"] = dict(json_or(fields["env"], {}))
    fields["cpu"] = float(fields["cpu"])
    fields["created_at"] = float(fields["created_at"])
    return SnapshotRecord(**fields)


class SnapshotRepository:
    """CRUD on the ``snapshots`` table. Every write commits (durably) before returning."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sessions = sessions  # kept for the repositories' common shape
        self._engine = engine

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        """Run one writing statement in its own transaction; the rows it changed."""
        with transaction(self._engine) as cursor:
            cursor.execute(sql, params)
            changed = int(cursor.rowcount)
        return changed

    def add(self, record: SnapshotRecord) -> None:
        values = tuple(_to_sql(name, getattr(record, name)) for name in _FIELDS)
        marks = ", ".join("?" * len(_FIELDS))
        self._write(f"INSERT INTO {_TABLE} ({_COLUMNS}) VALUES ({marks})", values)

    def total_mib(self) -> int:
        """The MiB of disk all snapshots' images take, summed in SQL (asked on every
        admission and space check: reading every record cost ~1 ms)."""
        ((total,),) = fetch_all(self._engine, _TOTAL_MIB)
        return int(total)

    def get(self, name: str) -> SnapshotRecord | None:
        rows = fetch_all(self._engine, f"SELECT {_COLUMNS} FROM {_TABLE} WHERE name = ?", (name,))
        return _from_sql(rows[0]) if rows else None

    def list(self) -> list[SnapshotRecord]:
        rows = fetch_all(self._engine, f"SELECT {_COLUMNS} FROM {_TABLE} ORDER BY created_at")
        return [_from_sql(row) for row in rows]

    def update(self, name: str, **fields: Any) -> SnapshotRecord:
        """Set ``fields`` (SnapshotRecord's names) in one transaction; the record after."""
        unknown = set(fields) - set(_FIELDS) | ({"name"} & set(fields))
        if unknown:
            raise TypeError(f"not updatable snapshot fields: {', '.join(sorted(unknown))}")
        if not fields:
            record = self.get(name)
            if record is None:
                raise KeyError(name)
            return record
        assignments = ", ".join(f"{key} = ?" for key in fields)
        values = tuple(_to_sql(key, value) for key, value in fields.items())
        with transaction(self._engine, immediate=True) as cursor:
            cursor.execute(f"UPDATE {_TABLE} SET {assignments} WHERE name = ?", (*values, name))
            if cursor.rowcount == 0:
                raise KeyError(name)
            cursor.execute(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE name = ?", (name,))
            row: tuple[Any, ...] | None = cursor.fetchone()
        if row is None:  # never: it was updated in this transaction
            raise KeyError(name)
        return _from_sql(row)

    def delete(self, name: str) -> None:
        self._write(f"DELETE FROM {_TABLE} WHERE name = ?", (name,))
