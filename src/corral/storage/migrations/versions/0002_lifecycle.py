"""Park, wake, fork and snapshots: sandbox columns and the snapshots table.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("secret_keys", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(
            sa.Column("on_timeout", sa.String(8), nullable=False, server_default="kill")
        )
        batch.add_column(sa.Column("auto_park_idle", sa.Integer, nullable=True))
        batch.add_column(
            sa.Column("auto_wake", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("image_path", sa.Text, nullable=True))
        batch.add_column(sa.Column("image_mib", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("parent_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("last_active_at", sa.Float, nullable=True))
    op.create_table(
        "snapshots",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("source_id", sa.String(32), nullable=False),
        sa.Column("template", sa.String(128), nullable=False),
        sa.Column("cpu", sa.Float, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_mib", sa.Integer, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("image_path", sa.Text, nullable=False),
        sa.Column("size_mib", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("snapshots")
    with op.batch_alter_table("sandboxes") as batch:
        for column in (
            "last_active_at",
            "parent_id",
            "image_mib",
            "image_path",
            "auto_wake",
            "auto_park_idle",
            "on_timeout",
            "secret_keys",
        ):
            batch.drop_column(column)
