"""Project services that are a port of a sandbox (``corral service add NAME --sandbox ID``).

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("project_services") as batch:
        batch.add_column(sa.Column("sandbox_id", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("project_services") as batch:
        batch.drop_column("sandbox_id")
