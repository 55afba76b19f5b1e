"""A sandbox's network traffic counted in the slots it left (park): the live slot's counters
add to these (``service/metrics.py``).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

COLUMNS = ("net_rx_bytes", "net_rx_packets", "net_tx_bytes", "net_tx_packets")


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
