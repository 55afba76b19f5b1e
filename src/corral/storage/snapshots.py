"""Snapshot records."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import SnapshotRecord
from corral.storage.tables import SnapshotRow

_FIELDS = [f.name for f in dataclasses.fields(SnapshotRecord)]
_TOTAL_MIB = "SELECT COALESCE(SUM(size_mib), 0) FROM snapshots"


def _record(row: SnapshotRow) -> SnapshotRecord:
    return SnapshotRecord(**{name: getattr(row, name) for name in _FIELDS})


class SnapshotRepository:
    """CRUD on the ``snapshots`` table. Every write commits before returning."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def add(self, record: SnapshotRecord) -> None:
        with self._sessions.begin() as session:
            session.add(SnapshotRow(**dataclasses.asdict(record)))

    def total_mib(self) -> int:
        """The MiB of disk all snapshots' images take, summed in SQL (asked on every
        admission and space check: reading every record cost ~1 ms)."""
        with self._sessions() as session:
            return int(session.execute(text(_TOTAL_MIB)).scalar_one())

    def get(self, name: str) -> SnapshotRecord | None:
        with self._sessions() as session:
            row = session.get(SnapshotRow, name)
            return _record(row) if row else None

    def list(self) -> list[SnapshotRecord]:
        with self._sessions() as session:
            rows = session.scalars(select(SnapshotRow).order_by(SnapshotRow.created_at)).all()
            return [_record(row) for row in rows]

    def update(self, name: str, **fields: Any) -> SnapshotRecord:
        with self._sessions.begin() as session:
            row = session.get(SnapshotRow, name)
            if row is None:
                raise KeyError(name)
            for key, value in fields.items():
                setattr(row, key, value)
            session.flush()
            return _record(row)

    def delete(self, name: str) -> None:
        with self._sessions.begin() as session:
            row = session.get(SnapshotRow, name)
            if row is not None:
                session.delete(row)
