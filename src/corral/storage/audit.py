"""The audit log (``audit_log``): append and query, nothing else.

Append-only by construction: this repository has no update or delete, and triggers made by the
migration make SQLite itself refuse both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import AuditEntry
from corral.storage.tables import AuditRow

_FIELDS = [f.name for f in dataclasses.fields(AuditEntry) if f.name != "id"]


class AuditRepository:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def append(self, entries: Iterable[AuditEntry]) -> None:
        """Store ``entries`` in one transaction (one fsync for a batch)."""
        rows = [AuditRow(**{name: getattr(e, name) for name in _FIELDS}) for e in entries]
        if not rows:
            return
        with self._sessions.begin() as session:
            session.add_all(rows)

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
