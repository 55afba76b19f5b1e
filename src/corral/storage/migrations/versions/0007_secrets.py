"""Brokered secrets: the sealed values, the bindings to sandboxes, the injection audit.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("preset", sa.String(16), nullable=False),
        sa.Column("hosts", sa.JSON, nullable=False),
        sa.Column("options", sa.JSON, nullable=False),
        sa.Column("sealed", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("last_used_at", sa.Float, nullable=True),
    )
    op.create_table(
        "secret_bindings",
        sa.Column("sandbox_id", sa.String(32), primary_key=True),
        sa.Column("secret", sa.String(64), primary_key=True),
        sa.Column("placeholder", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "secret_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("sandbox_id", sa.String(32), nullable=False, index=True),
        sa.Column("secret", sa.String(64), nullable=False, index=True),
        sa.Column("host", sa.String(253), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("secret_audit")
    op.drop_table("secret_bindings")
    op.drop_table("secrets")
