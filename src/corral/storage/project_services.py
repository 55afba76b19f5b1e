"""The project's services (the ``project_services`` table): names sandboxes resolve."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import ProjectServiceRecord
from corral.storage.tables import ProjectServiceRow


def _record(row: ProjectServiceRow) -> ProjectServiceRecord:
    return ProjectServiceRecord(
        row.name, row.address, [int(p) for p in row.ports or []], row.created_at, row.sandbox_id
    )


class ProjectServiceRepository:
    """CRUD on ``project_services``. Every write commits before returning."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def put(self, record: ProjectServiceRecord) -> None:
        """Add a service, or replace the one of the same name."""
        with self._sessions.begin() as session:
            row = session.get(ProjectServiceRow, record.name)
            if row is None:
                session.add(
                    ProjectServiceRow(
                        name=record.name,
                        address=record.address,
                        ports=list(record.ports),
                        created_at=record.created_at,
                        sandbox_id=record.sandbox_id,
                    )
                )
            else:
                row.address, row.ports = record.address, list(record.ports)
                row.sandbox_id = record.sandbox_id

    def list(self) -> list[ProjectServiceRecord]:
        with self._sessions() as session:
            rows = session.scalars(select(ProjectServiceRow).order_by(ProjectServiceRow.name))
            return [_record(row) for row in rows.all()]

    def delete(self, name: str) -> bool:
        with self._sessions.begin() as session:
            row = session.get(ProjectServiceRow, name)
            if row is None:
                return False
            session.delete(row)
            return True
