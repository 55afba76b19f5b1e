"""The workspace policy's stored form: one row of JSON (``service/policy.py`` gives it meaning)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from corral.storage.tables import WorkspacePolicyRow

ROW = "workspace"


class PolicyRepository:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def load(self) -> dict[str, Any]:
        with self._sessions() as session:
            row = session.get(WorkspacePolicyRow, ROW)
            return dict(row.body or {}) if row else {}

    def save(self, body: dict[str, Any]) -> None:
        with self._sessions.begin() as session:
            session.merge(WorkspacePolicyRow(name=ROW, body=body, updated_at=time.time()))
