"""Templates: build results, defaults and ceilings; the image each live sandbox is pinned to.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_COLUMNS = [
    sa.Column("source", sa.Text, nullable=False, server_default=""),
    sa.Column("workdir", sa.Text, nullable=True),
    sa.Column("user", sa.String(128), nullable=True),
    sa.Column("start_cmd", sa.JSON, nullable=True),
    sa.Column("max_cpu", sa.Float, nullable=True),
    sa.Column("max_memory_mib", sa.Integer, nullable=True),
    sa.Column("max_disk_mib", sa.Integer, nullable=True),
    sa.Column("warmup", sa.Text, nullable=True),
    sa.Column("warm", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("pool", sa.Integer, nullable=False, server_default="0"),
    sa.Column("labels", sa.JSON, nullable=False, server_default="{}"),
]


def upgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        for column in _COLUMNS:
            batch.add_column(column)
    op.create_table(
        "template_pins",
        sa.Column("sandbox_id", sa.String(32), primary_key=True),
        sa.Column("template", sa.String(128), nullable=False, index=True),
        sa.Column("image", sa.Text, nullable=False),
        sa.Column("workdir", sa.Text, nullable=True),
        sa.Column("user", sa.String(128), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("template_pins")
    with op.batch_alter_table("templates") as batch:
        for column in reversed(_COLUMNS):
            batch.drop_column(column.name)
