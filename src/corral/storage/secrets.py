"""Brokered secrets at rest: the ``secrets``, ``secret_bindings`` and ``secret_audit`` tables.

Values are stored only sealed (``sealing.py``); a record read here carries the sealed text, which
only the broker opens. Bindings are read by plain SQL (``storage/raw.py``): every answer about one
sandbox, a create's and a pool claim's included, names the secrets bound to it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from sqlalchemy import Engine, delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.raw import fetch_all
from corral.storage.records import SecretAuditRecord, SecretBindingRecord, SecretRecord
from corral.storage.tables import SecretAuditRow, SecretBindingRow, SecretRow


def _record(row: SecretRow) -> SecretRecord:
    return SecretRecord(
        name=row.name,
        preset=row.preset,
        hosts=list(row.hosts or []),
        options=dict(row.options or {}),
        sealed=row.sealed,
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_used_at=row.last_used_at,
    )


class SecretRepository:
    """CRUD on the three secret tables. Every write commits before returning."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sessions = sessions
        self._engine = engine

    # -- secrets -----------------------------------------------------------------------------
    def put(self, record: SecretRecord) -> None:
        """Add a secret, or replace the one of the same name (keeping its creation time)."""
        with self._sessions.begin() as session:
            row = session.get(SecretRow, record.name)
            if row is None:
                session.add(
                    SecretRow(
                        name=record.name,
                        preset=record.preset,
                        hosts=record.hosts,
                        options=record.options,
                        sealed=record.sealed,
                        created_at=record.created_at,
                        updated_at=record.updated_at,
                        last_used_at=record.last_used_at,
                    )
                )
            else:
                row.preset = record.preset
                row.hosts = record.hosts
                row.options = record.options
                row.sealed = record.sealed
                row.updated_at = record.updated_at

    def get(self, name: str) -> SecretRecord | None:
        with self._sessions() as session:
            row = session.get(SecretRow, name)
            return _record(row) if row else None

    def list(self) -> builtins.list[SecretRecord]:
        with self._sessions() as session:
            return [_record(r) for r in session.scalars(select(SecretRow).order_by(SecretRow.name))]

    def delete(self, name: str) -> bool:
        """Remove a secret and every binding of it."""
        with self._sessions.begin() as session:
            row = session.get(SecretRow, name)
            if row is None:
                return False
            session.delete(row)
            session.execute(delete(SecretBindingRow).where(SecretBindingRow.secret == name))
            return True

    def mark_used(self, used: dict[str, float]) -> None:
        with self._sessions.begin() as session:
            for name, at in used.items():
                session.execute(
                    update(SecretRow).where(SecretRow.name == name).values(last_used_at=at)
                )

    # -- bindings ----------------------------------------------------------------------------
    def bind(self, bindings: Iterable[SecretBindingRecord]) -> None:
        with self._sessions.begin() as session:
            for b in bindings:
                session.merge(
                    SecretBindingRow(
                        sandbox_id=b.sandbox_id,
                        secret=b.secret,
                        placeholder=b.placeholder,
                        created_at=b.created_at,
                    )
                )

    def bindings(self, sandbox_id: str | None = None) -> builtins.list[SecretBindingRecord]:
        where, params = (
            ("WHERE sandbox_id = ? ", (sandbox_id,)) if sandbox_id is not None else ("", ())
        )
        rows = fetch_all(
            self._engine,
            "SELECT sandbox_id, secret, placeholder, created_at FROM secret_bindings "
            f"{where}ORDER BY sandbox_id, secret",
            params,
        )
        return [SecretBindingRecord(s, n, p, float(at)) for s, n, p, at in rows]

    def unbind(self, sandbox_id: str, secret: str | None = None) -> int:
        """Remove one binding of a sandbox (or all of them); returns how many."""
        with self._sessions.begin() as session:
            query = delete(SecretBindingRow).where(SecretBindingRow.sandbox_id == sandbox_id)
            if secret is not None:
                query = query.where(SecretBindingRow.secret == secret)
            return int(session.execute(query).rowcount or 0)  # type: ignore[attr-defined]

    # -- audit -------------------------------------------------------------------------------
    def audit(self, entries: Iterable[SecretAuditRecord], keep: int) -> None:
        """Append ``entries``; keep only the newest ``keep`` rows."""
        with self._sessions.begin() as session:
            session.add_all(
                SecretAuditRow(
                    at=e.at,
                    sandbox_id=e.sandbox_id,
                    secret=e.secret,
                    host=e.host,
                    method=e.method,
                    path=e.path,
                )
                for e in entries
            )
            session.flush()
            newest = session.scalars(
                select(SecretAuditRow.id).order_by(SecretAuditRow.id.desc()).offset(keep).limit(1)
            ).first()
            if newest is not None:
                session.execute(delete(SecretAuditRow).where(SecretAuditRow.id <= newest))

    def audit_log(
        self, *, secret: str | None = None, sandbox_id: str | None = None, limit: int = 100
    ) -> builtins.list[SecretAuditRecord]:
        """The newest ``limit`` entries, oldest first."""
        with self._sessions() as session:
            query = select(SecretAuditRow).order_by(SecretAuditRow.id.desc()).limit(limit)
            if secret is not None:
                query = query.where(SecretAuditRow.secret == secret)
            if sandbox_id is not None:
                query = query.where(SecretAuditRow.sandbox_id == sandbox_id)
            rows = list(session.scalars(query))
        return [
            SecretAuditRecord(r.at, r.sandbox_id, r.secret, r.host, r.method, r.path)
            for r in reversed(rows)
        ]
