"""The database handle: engine, migrations at open, and the repositories.

SQLite in WAL mode with ``synchronous=FULL`` so a committed state change survives a crash of the
daemon or the host. All access is short and synchronous; callers serialize per sandbox.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.apikeys import ApiKeyRepository
from corral.storage.audit import AuditRepository
from corral.storage.policy import PolicyRepository
from corral.storage.ports import PortRepository
from corral.storage.project_services import ProjectServiceRepository
from corral.storage.sandboxes import ChangeListener, SandboxRepository
from corral.storage.secrets import SecretRepository
from corral.storage.snapshots import SnapshotRepository
from corral.storage.templates import TemplateRepository
from corral.storage.trusted_keys import TrustedKeyRepository
from corral.timing import current_phases

MIGRATIONS = Path(__file__).with_name("migrations")


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def _commit_started(session: Session) -> None:
    session.info["commit_started"] = time.perf_counter()


def _commit_done(session: Session) -> None:
    started = session.info.pop("commit_started", None)
    phases = current_phases()
    if started is not None and phases is not None:
        phases.add("db commit", (time.perf_counter() - started) * 1000)


class Database:
    """Opens (and migrates to the newest schema) the store at ``path``; ``:memory:`` for tests.
    ``on_sandbox_change`` is told of every sandbox record the store commits."""

    def __init__(
        self, path: Path | str, *, on_sandbox_change: ChangeListener | None = None
    ) -> None:
        url = "sqlite://" if str(path) == ":memory:" else f"sqlite:///{path}"
        kwargs: dict[str, Any] = {}
        if str(path) == ":memory:":
            from sqlalchemy.pool import StaticPool

            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        else:
            kwargs = {"connect_args": {"check_same_thread": False}}
        self.engine: Engine = create_engine(url, **kwargs)
        event.listen(self.engine, "connect", _on_connect)
        self._migrate()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Each commit's flush and durable write, in the phases of the call that made it.
        event.listen(self._sessions, "before_commit", _commit_started)
        event.listen(self._sessions, "after_commit", _commit_done)
        self.sandboxes = SandboxRepository(self._sessions, self.engine, on_sandbox_change)
        self.api_keys = ApiKeyRepository(self._sessions, self.engine)
        self.templates = TemplateRepository(self._sessions, self.engine)
        self.snapshots = SnapshotRepository(self._sessions, self.engine)
        self.trusted_keys = TrustedKeyRepository(self._sessions)
        self.project_services = ProjectServiceRepository(self._sessions)
        self.ports = PortRepository(self._sessions)
        self.secrets = SecretRepository(self._sessions, self.engine)
        self.audit = AuditRepository(self._sessions, self.engine)
        self.policy = PolicyRepository(self._sessions)

    def _migrate(self) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def close(self) -> None:
        self.engine.dispose()
