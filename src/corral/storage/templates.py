"""Template records and the image pins of sandboxes."""

from __future__ import annotations

import builtins
import dataclasses

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import TemplatePin, TemplateRecord
from corral.storage.tables import TemplatePinRow, TemplateRow

_FIELDS = [f.name for f in dataclasses.fields(TemplateRecord)]


def _record(row: TemplateRow) -> TemplateRecord:
    values = {name: getattr(row, name) for name in _FIELDS}
    values["env"] = dict(row.env or {})
    values["labels"] = dict(row.labels or {})
    values["warm"] = bool(row.warm)
    values["pool"] = int(row.pool or 0)
    values["source"] = row.source or ""
    return TemplateRecord(**values)


class TemplateRepository:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def put(self, *records: TemplateRecord) -> None:
        """Insert or replace ``records`` in one transaction (a build's tags appear together)."""
        with self._sessions.begin() as session:
            for record in records:
                session.merge(TemplateRow(**dataclasses.asdict(record)))

    def get(self, name: str) -> TemplateRecord | None:
        with self._sessions() as session:
            row = session.get(TemplateRow, name)
            return _record(row) if row else None

    def list(self) -> builtins.list[TemplateRecord]:
        with self._sessions() as session:
            rows = session.scalars(select(TemplateRow).order_by(TemplateRow.name)).all()
            return [_record(row) for row in rows]

    def delete(self, name: str) -> None:
        with self._sessions.begin() as session:
            session.execute(delete(TemplateRow).where(TemplateRow.name == name))

    # -- pins --------------------------------------------------------------------------------
    def pin(self, *pins: TemplatePin) -> None:
        """Record ``pins`` (replacing any of the same sandboxes), in one transaction."""
        with self._sessions.begin() as session:
            for pin in pins:
                session.merge(TemplatePinRow(**dataclasses.asdict(pin)))

    def get_pin(self, sandbox_id: str) -> TemplatePin | None:
        with self._sessions() as session:
            row = session.get(TemplatePinRow, sandbox_id)
            if row is None:
                return None
            return TemplatePin(row.sandbox_id, row.template, row.image, row.workdir, row.user)

    def pins(self) -> builtins.list[TemplatePin]:
        with self._sessions() as session:
            rows = session.scalars(select(TemplatePinRow)).all()
            return [TemplatePin(r.sandbox_id, r.template, r.image, r.workdir, r.user) for r in rows]

    def unpin(self, sandbox_ids: builtins.list[str]) -> None:
        if not sandbox_ids:
            return
        with self._sessions.begin() as session:
            session.execute(
                delete(TemplatePinRow).where(TemplatePinRow.sandbox_id.in_(sandbox_ids))
            )
