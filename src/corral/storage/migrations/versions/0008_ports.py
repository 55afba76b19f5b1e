"""Inbound ports: the ports of each sandbox opened through the daemon.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_ports",
        sa.Column(
            "sandbox_id",
            sa.String(32),
            sa.ForeignKey("sandboxes.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("port", sa.Integer, primary_key=True),
        sa.Column("public", sa.Boolean, nullable=False),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sandbox_ports")
