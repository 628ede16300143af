"""Versions that absorbed a folded temporary file name it, so the change feed can say it is gone.

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
    op.add_column("memory_versions", sa.Column("folded_id", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("memory_versions", "folded_id")
