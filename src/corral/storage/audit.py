"""The audit log (``audit_log``): append and query, nothing else.

Append-only by construction: this repository has no update or delete, and triggers made by the
migration make SQLite itself refuse both. Appends are plain SQL (every audited call, each exec
included, ends up here; through the ORM the batch's unit of work was a tenth of the daemon's
CPU per exec); queries stay on the ORM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.raw import transaction
from corral.storage.records import AuditEntry
from corral.storage.tables import AuditRow

_FIELDS = [f.name for f in dataclasses.fields(AuditEntry) if f.name != "id"]
_INSERT = (
    f"INSERT INTO {AuditRow.__tablename__} ({', '.join(_FIELDS)}) "
    f"VALUES ({', '.join('?' * len(_FIELDS))})"
)


class AuditRepository:
    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sessions = sessions
        self._engine = engine

    def append(self, entries: Iterable[AuditEntry]) -> None:
        """Store ``entries`` in one transaction (one durable commit for a batch, or none)."""
        rows = [tuple(getattr(e, name) for name in _FIELDS) for e in entries]
        if not rows:
            return
        with transaction(self._engine) as cursor:
            cursor.executemany(_INSERT, rows)

    def query(
        self,
        *,
        key_name: str | None = None,
        target: str | None = None,
        since: float | None = None,
        after_id: int = 0,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        """Entries oldest first, filtered; ``after_id`` pages on from a previous answer."""
        query = select(AuditRow).where(AuditRow.id > after_id).order_by(AuditRow.id).limit(limit)
        if key_name is not None:
            query = query.where(AuditRow.key_name == key_name)
        if target is not None:
            query = query.where(AuditRow.target == target)
        if since is not None:
            query = query.where(AuditRow.at >= since)
        with self._sessions() as session:
            return [
                AuditEntry(id=row.id, **{name: getattr(row, name) for name in _FIELDS})
                for row in session.scalars(query).all()
            ]
