"""Store kinds: 'memory' (path-addressed documents) or 'journal' (one JSON line per turn).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("memory_stores") as batch:
        batch.add_column(sa.Column("kind", sa.Text(), nullable=False, server_default="memory"))


def downgrade() -> None:
    with op.batch_alter_table("memory_stores") as batch:
        batch.drop_column("kind")
