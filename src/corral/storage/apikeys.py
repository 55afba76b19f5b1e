"""API keys, stored only as SHA-256 hashes (keys are 160-bit random, so no slow hash is needed).

A key's row is never deleted: a revoked key keeps its row (``revoked_at``) so that the audit log
and the owners of sandboxes still name it. ``get`` and ``find_by_hash`` (a key check, a claim's
quota check) read by plain SQL (``storage/raw.py``); the rest goes through the ORM.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.raw import fetch_all, json_or
from corral.storage.records import ApiKeyRecord
from corral.storage.tables import ApiKeyRow

_COLUMNS = (
    "id, name, key_hash, role, created_at, scopes, expires_at, last_used_at, revoked_at,"
    " quotas, rate_limit, created_by"
)


def _record(row: ApiKeyRow) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=row.id,
        name=row.name,
        key_hash=row.key_hash,
        role=row.role,
        created_at=row.created_at,
        scopes=tuple(row.scopes) if row.scopes is not None else None,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        quotas={str(k): float(v) for k, v in (row.quotas or {}).items()},
        rate_limit=row.rate_limit,
        created_by=row.created_by,
    )


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _from_sql(row: tuple[Any, ...]) -> ApiKeyRecord:
    """A row of ``_COLUMNS`` decoded as ``_record`` reads the ORM's row."""
    (
        id_, name, key_hash, role, created_at, scopes, expires_at, last_used_at, revoked_at,
        quotas, rate_limit, created_by,
    ) = row  # fmt: skip
    scope_list = json_or(scopes, None)
    return ApiKeyRecord(
        id=id_,
        name=name,
        key_hash=key_hash,
        role=role,
        created_at=float(created_at),
        scopes=tuple(scope_list) if scope_list is not None else None,
        expires_at=_optional_float(expires_at),
        last_used_at=_optional_float(last_used_at),
        revoked_at=_optional_float(revoked_at),
        quotas={str(k): float(v) for k, v in json_or(quotas, {}).items()},
        rate_limit=_optional_float(rate_limit),
        created_by=created_by,
    )


class ApiKeyRepository:
    """CRUD on ``api_keys``. Every write commits before returning."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sessions = sessions
        self._engine = engine

    def add(self, record: ApiKeyRecord) -> None:
        with self._sessions.begin() as session:
            session.add(
                ApiKeyRow(
                    id=record.id,
                    name=record.name,
                    key_hash=record.key_hash,
                    role=record.role,
                    created_at=record.created_at,
                    scopes=list(record.scopes) if record.scopes is not None else None,
                    expires_at=record.expires_at,
                    revoked_at=record.revoked_at,
                    quotas=dict(record.quotas),
                    rate_limit=record.rate_limit,
                    created_by=record.created_by,
                )
            )

    def find_by_hash(self, key_hash: str) -> ApiKeyRecord | None:
        sql = f"SELECT {_COLUMNS} FROM api_keys WHERE key_hash = ? LIMIT 1"
        rows = fetch_all(self._engine, sql, (key_hash,))
        return _from_sql(rows[0]) if rows else None

    def get(self, key_id: str) -> ApiKeyRecord | None:
        rows = fetch_all(self._engine, f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", (key_id,))
        return _from_sql(rows[0]) if rows else None

    def find_active(self, name: str) -> ApiKeyRecord | None:
        """The key called ``name`` that is not revoked (names are unique among those)."""
        with self._sessions() as session:
            row = session.scalars(
                select(ApiKeyRow).where(ApiKeyRow.name == name, ApiKeyRow.revoked_at.is_(None))
            ).first()
            return _record(row) if row else None

    def list(self, *, include_revoked: bool = False) -> builtins.list[ApiKeyRecord]:
        with self._sessions() as session:
            query = select(ApiKeyRow).order_by(ApiKeyRow.created_at)
            if not include_revoked:
                query = query.where(ApiKeyRow.revoked_at.is_(None))
            return [_record(row) for row in session.scalars(query).all()]

    def revoke(self, key_id: str, at: float | None = None) -> None:
        with self._sessions.begin() as session:
            row = session.get(ApiKeyRow, key_id)
            if row is not None and row.revoked_at is None:
                row.revoked_at = at or time.time()

    def touch(self, key_id: str, at: float) -> None:
        """Record a use (callers throttle this: it is a write)."""
        with self._sessions.begin() as session:
            row = session.get(ApiKeyRow, key_id)
            if row is not None:
                row.last_used_at = at

    def count(self) -> int:
        with self._sessions() as session:
            return len(session.scalars(select(ApiKeyRow.id)).all())
