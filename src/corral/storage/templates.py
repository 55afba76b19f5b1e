"""Template records and the image pins of sandboxes.

Reads of records and pins are plain SQL (``storage/raw.py``): a create and a pool's claim read
the template, and every exec of a sandbox made before this daemon started reads its pin. Writes
stay on the ORM.
"""

from __future__ import annotations

import builtins
import dataclasses
from typing import Any

from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.raw import fetch_all, flag, json_or
from corral.storage.records import TemplatePin, TemplateRecord
from corral.storage.tables import TemplatePinRow, TemplateRow

_FIELDS = [f.name for f in dataclasses.fields(TemplateRecord)]
# The columns in TemplateRecord's field order (the table's names are the record's).
_COLUMNS = ", ".join(f'"{name}"' for name in _FIELDS)
_PIN_COLUMNS = 'sandbox_id, template, image, workdir, "user"'


def _record(row: TemplateRow) -> TemplateRecord:
    values = {name: getattr(row, name) for name in _FIELDS}
    values["env"] = dict(row.env or {})
    values["labels"] = dict(row.labels or {})
    values["warm"] = bool(row.warm)
    values["pool"] = int(row.pool or 0)
    values["source"] = row.source or ""
    return TemplateRecord(**values)


def _from_sql(row: tuple[Any, ...]) -> TemplateRecord:
    """A row of ``_COLUMNS`` decoded as ``_record`` reads the ORM's row."""
    values = dict(zip(_FIELDS, row, strict=True))
    values["env"] = dict(json_or(values["env"], {}))
    values["labels"] = dict(json_or(values["labels"], {}))
    values["start_cmd"] = json_or(values["start_cmd"], None)
    values["warm"] = bool(values["warm"])
    values["pool"] = int(values["pool"] or 0)
    values["source"] = values["source"] or ""
    values["shared"] = flag(values["shared"])
    for name in ("cpu", "created_at", "max_cpu"):
        if values[name] is not None:
            values[name] = float(values[name])
    return TemplateRecord(**values)


class TemplateRepository:
    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sessions = sessions
        self._engine = engine

    def put(self, *records: TemplateRecord) -> None:
        """Insert or replace ``records`` in one transaction (a build's tags appear together)."""
        with self._sessions.begin() as session:
            for record in records:
                session.merge(TemplateRow(**dataclasses.asdict(record)))

    def get(self, name: str) -> TemplateRecord | None:
        rows = fetch_all(self._engine, f"SELECT {_COLUMNS} FROM templates WHERE name = ?", (name,))
        return _from_sql(rows[0]) if rows else None

    def list(self) -> builtins.list[TemplateRecord]:
        rows = fetch_all(self._engine, f"SELECT {_COLUMNS} FROM templates ORDER BY name")
        return [_from_sql(row) for row in rows]

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
        sql = f"SELECT {_PIN_COLUMNS} FROM template_pins WHERE sandbox_id = ?"
        rows = fetch_all(self._engine, sql, (sandbox_id,))
        return TemplatePin(*rows[0]) if rows else None

    def pins(self) -> builtins.list[TemplatePin]:
        rows = fetch_all(self._engine, f"SELECT {_PIN_COLUMNS} FROM template_pins")
        return [TemplatePin(*row) for row in rows]

    def unpin(self, sandbox_ids: builtins.list[str]) -> None:
        if not sandbox_ids:
            return
        with self._sessions.begin() as session:
            session.execute(
                delete(TemplatePinRow).where(TemplatePinRow.sandbox_id.in_(sandbox_ids))
            )
