"""Warm templates, ready pools, and the image a snapshot was taken from.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        batch.add_column(sa.Column("warm_image", sa.Text, nullable=True))
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("pooled", sa.Boolean, nullable=False, server_default=sa.false()))
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("image", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("image")
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("pooled")
    with op.batch_alter_table("templates") as batch:
        batch.drop_column("warm_image")
