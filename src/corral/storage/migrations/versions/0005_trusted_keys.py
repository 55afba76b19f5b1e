"""Trusted signers of exports: public keys whose memory images this workspace restores.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trusted_keys",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("public_key", sa.String(128), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("trusted_keys")
