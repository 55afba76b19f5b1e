"""Many users on one workspace: key roles, scopes, expiry and quotas; owners of sandboxes,
snapshots and templates; the workspace policy; the append-only audit log.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The audit log is append-only: the database itself refuses to change or remove an entry.
_APPEND_ONLY = (
    "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
)


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("scopes", sa.JSON, nullable=True))
        batch.add_column(sa.Column("expires_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("quotas", sa.JSON, nullable=False, server_default="{}"))
        batch.add_column(sa.Column("rate_limit", sa.Float, nullable=True))
        batch.add_column(sa.Column("created_by", sa.String(128), nullable=True))
    for table in ("sandboxes", "snapshots", "templates"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("owner", sa.String(32), nullable=True, index=True))
    with op.batch_alter_table("templates") as batch:
        # Templates made before keys had owners were the workspace's: members may use them.
        batch.add_column(sa.Column("shared", sa.Boolean, nullable=False, server_default=sa.true()))
    op.create_table(
        "workspace_policy",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("key_id", sa.String(32), nullable=True, index=True),
        sa.Column("key_name", sa.String(128), nullable=True),
        sa.Column("action", sa.String(128), nullable=False),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("target", sa.String(253), nullable=True, index=True),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("result", sa.String(32), nullable=False),
        sa.Column("source", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
    )
    for statement in _APPEND_ONLY:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS audit_no_update")
    op.execute("DROP TRIGGER IF EXISTS audit_no_delete")
    op.drop_table("audit_log")
    op.drop_table("workspace_policy")
    with op.batch_alter_table("templates") as batch:
        batch.drop_column("shared")
    for table in ("sandboxes", "snapshots", "templates"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("owner")
    with op.batch_alter_table("api_keys") as batch:
        for column in (
            "created_by",
            "rate_limit",
            "quotas",
            "revoked_at",
            "last_used_at",
            "expires_at",
            "scopes",
        ):
            batch.drop_column(column)
