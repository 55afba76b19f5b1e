"""Template records."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import TemplateRecord
from corral.storage.tables import TemplateRow


def _record(row: TemplateRow) -> TemplateRecord:
    return TemplateRecord(
        name=row.name,
        image=row.image,
        cpu=row.cpu,
        memory_mib=row.memory_mib,
        disk_mib=row.disk_mib,
        env=dict(row.env or {}),
        created_at=row.created_at,
    )


class TemplateRepository:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def put(self, record: TemplateRecord) -> None:
        with self._sessions.begin() as session:
            session.merge(
                TemplateRow(
                    name=record.name,
                    image=record.image,
                    cpu=record.cpu,
                    memory_mib=record.memory_mib,
                    disk_mib=record.disk_mib,
                    env=record.env,
                    created_at=record.created_at,
                )
            )

    def get(self, name: str) -> TemplateRecord | None:
        with self._sessions() as session:
            row = session.get(TemplateRow, name)
            return _record(row) if row else None

    def list(self) -> list[TemplateRecord]:
        with self._sessions() as session:
            rows = session.scalars(select(TemplateRow).order_by(TemplateRow.name)).all()
            return [_record(row) for row in rows]
