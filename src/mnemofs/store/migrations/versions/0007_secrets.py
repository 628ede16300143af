"""A per-store policy for credentials in content: 'refuse' (new stores) or 'allow'.

Stores that existed before keep working as they did ('allow'); an admin can tighten them
(`mnemofs stores update STORE --secrets refuse`) after `mnemofs db scan-secrets`.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "memory_stores", sa.Column("secrets", sa.Text(), nullable=False, server_default="refuse")
    )
    op.execute("UPDATE memory_stores SET secrets = 'allow'")


def downgrade() -> None:
    op.drop_column("memory_stores", "secrets")
