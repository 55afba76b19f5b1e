"""API keys, stored only as SHA-256 hashes (keys are 256-bit random, so no slow hash is needed)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import ApiKeyRecord
from corral.storage.tables import ApiKeyRow


class ApiKeyRepository:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def add(self, record: ApiKeyRecord) -> None:
        with self._sessions.begin() as session:
            session.add(
                ApiKeyRow(
                    id=record.id,
                    name=record.name,
                    key_hash=record.key_hash,
                    role=record.role,
                    created_at=record.created_at,
                )
            )

    def find_by_hash(self, key_hash: str) -> ApiKeyRecord | None:
        with self._sessions() as session:
            row = session.scalars(select(ApiKeyRow).where(ApiKeyRow.key_hash == key_hash)).first()
            if row is None:
                return None
            return ApiKeyRecord(row.id, row.name, row.key_hash, row.role, row.created_at)

    def count(self) -> int:
        with self._sessions() as session:
            return len(session.scalars(select(ApiKeyRow.id)).all())
