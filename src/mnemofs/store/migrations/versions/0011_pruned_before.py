"""Where a store's history starts being complete: ``memory_stores.pruned_before``.

``mnemofs versions prune`` removes versions older than a cutoff; a store's state at an earlier
time can then no longer be known, so restoring or forking it to such a time must be refused
(issue 19). Each prune that removes anything moves this to its cutoff; NULL: never pruned.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("memory_stores", sa.Column("pruned_before", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("memory_stores") as batch:
        batch.drop_column("pruned_before")
