"""Initial schema: sandboxes, api_keys, templates.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandboxes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("template", sa.String(128), nullable=False),
        sa.Column("cpu", sa.Float, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_mib", sa.Integer, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("slot_index", sa.Integer, nullable=True),
        sa.Column("operation", sa.String(32), nullable=True),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True, index=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "templates",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("image", sa.Text, nullable=False),
        sa.Column("cpu", sa.Float, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_mib", sa.Integer, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("templates")
    op.drop_table("api_keys")
    op.drop_table("sandboxes")
