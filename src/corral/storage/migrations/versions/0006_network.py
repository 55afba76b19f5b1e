"""Networking: each sandbox's egress policy, and the project's services.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("network", sa.Text, nullable=True))
    op.create_table(
        "project_services",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("address", sa.String(15), nullable=False),
        sa.Column("ports", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("project_services")
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("network")
