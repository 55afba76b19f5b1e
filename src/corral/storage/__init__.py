"""The embedded store: SQLite through SQLAlchemy, schema managed by Alembic migrations.

Only the service layer uses this package. Repositories return plain records (dataclasses), never
ORM objects, so nothing above the service ever holds a database session.
"""

from corral.storage.db import Database
from corral.storage.records import (
    ApiKeyRecord,
    AuditEntry,
    ProjectServiceRecord,
    SandboxPortRecord,
    SandboxRecord,
    SecretAuditRecord,
    SecretBindingRecord,
    SecretRecord,
    SnapshotRecord,
    TemplateRecord,
    TrustedKeyRecord,
)

__all__ = [
    "ApiKeyRecord",
    "AuditEntry",
    "Database",
    "ProjectServiceRecord",
    "SandboxPortRecord",
    "SandboxRecord",
    "SecretAuditRecord",
    "SecretBindingRecord",
    "SecretRecord",
    "SnapshotRecord",
    "TemplateRecord",
    "TrustedKeyRecord",
]
