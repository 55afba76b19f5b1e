"""Project services that are a port of a sandbox (``corral service add NAME --sandbox ID``).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("project_services") as batch:
        batch.add_column(sa.Column("sandbox_id", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("project_services") as batch:
        batch.drop_column("sandbox_id")
