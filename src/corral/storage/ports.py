"""The opened inbound ports (the ``sandbox_ports`` table); rows go with their sandbox's row."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import SandboxPortRecord
from corral.storage.tables import SandboxPortRow


def _record(row: SandboxPortRow) -> SandboxPortRecord:
    return SandboxPortRecord(row.sandbox_id, row.port, row.public, row.nonce, row.created_at)


class PortRepository:
    """CRUD on ``sandbox_ports``. Every write commits before returning."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def put(self, record: SandboxPortRecord) -> None:
        """Open a port, or change the one already open (its nonce too)."""
        with self._sessions.begin() as session:
            row = session.get(SandboxPortRow, (record.sandbox_id, record.port))
            if row is None:
                session.add(
                    SandboxPortRow(
                        sandbox_id=record.sandbox_id,
                        port=record.port,
                        public=record.public,
                        nonce=record.nonce,
                        created_at=record.created_at,
                    )
                )
            else:
                row.public, row.nonce = record.public, record.nonce

    def get(self, sandbox_id: str, port: int) -> SandboxPortRecord | None:
        with self._sessions() as session:
            row = session.get(SandboxPortRow, (sandbox_id, port))
            return None if row is None else _record(row)

    def list(self, sandbox_id: str) -> list[SandboxPortRecord]:
        with self._sessions() as session:
            rows = session.scalars(
                select(SandboxPortRow)
                .where(SandboxPortRow.sandbox_id == sandbox_id)
                .order_by(SandboxPortRow.port)
            )
            return [_record(row) for row in rows.all()]

    def delete(self, sandbox_id: str, port: int) -> bool:
        with self._sessions.begin() as session:
            row = session.get(SandboxPortRow, (sandbox_id, port))
            if row is None:
                return False
            session.delete(row)
            return True

    def delete_all(self, sandbox_id: str) -> int:
        with self._sessions.begin() as session:
            rows = session.scalars(
                select(SandboxPortRow).where(SandboxPortRow.sandbox_id == sandbox_id)
            ).all()
            for row in rows:
                session.delete(row)
            return len(rows)
