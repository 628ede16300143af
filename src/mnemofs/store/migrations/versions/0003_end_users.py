"""End users: a store may belong to one (owner), a session may act for one (user_id).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("memory_stores") as batch:
        batch.add_column(sa.Column("owner", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("user_id", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("user_id")
    with op.batch_alter_table("memory_stores") as batch:
        batch.drop_column("owner")
