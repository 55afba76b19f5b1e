"""Trusted signers of exports (the ``trusted_keys`` table)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import TrustedKeyRecord
from corral.storage.tables import TrustedKeyRow


def _record(row: TrustedKeyRow) -> TrustedKeyRecord:
    return TrustedKeyRecord(row.name, row.public_key, row.created_at)


class TrustedKeyRepository:
    """CRUD on ``trusted_keys``. Every write commits before returning."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def add(self, record: TrustedKeyRecord) -> None:
        with self._sessions.begin() as session:
            session.add(
                TrustedKeyRow(
                    name=record.name, public_key=record.public_key, created_at=record.created_at
                )
            )

    def get(self, name: str) -> TrustedKeyRecord | None:
        with self._sessions() as session:
            row = session.get(TrustedKeyRow, name)
            return _record(row) if row else None

    def find_by_key(self, public_key: str) -> TrustedKeyRecord | None:
        with self._sessions() as session:
            row = session.scalars(
                select(TrustedKeyRow).where(TrustedKeyRow.public_key == public_key)
            ).first()
            return _record(row) if row else None

    def list(self) -> list[TrustedKeyRecord]:
        with self._sessions() as session:
            rows = session.scalars(select(TrustedKeyRow).order_by(TrustedKeyRow.name)).all()
            return [_record(row) for row in rows]

    def delete(self, name: str) -> bool:
        with self._sessions.begin() as session:
            row = session.get(TrustedKeyRow, name)
            if row is None:
                return False
            session.delete(row)
            return True
