"""Capacity policy per store (refuse, or evict the least recently accessed memory) and the
last access of each memory.

Plain ADD COLUMN, no batch mode: rebuilding ``memories`` on SQLite would drop the search
triggers of 0004.

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
    op.add_column(
        "memory_stores", sa.Column("on_full", sa.Text(), nullable=False, server_default="refuse")
    )
    op.add_column("memories", sa.Column("accessed_at", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("memories", "accessed_at")
    op.drop_column("memory_stores", "on_full")
