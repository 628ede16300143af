"""Folds the change feed can see, and a seq that is never given out twice.

- ``memory_versions.folded_id``: the version that absorbed a folded temporary file names it, so
  the change feed can report that memory gone (its own versions are dropped).
- SQLite: ``memory_versions.seq`` becomes AUTOINCREMENT. A plain rowid key hands out the
  highest number again once that row is deleted (a fold deletes the newest versions), and a
  reader of the feed that had seen the old row skipped the new one. The table is rebuilt (no
  triggers live on it); PostgreSQL's sequence never reuses a number.

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
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table(
            "memory_versions", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            batch.add_column(sa.Column("folded_id", sa.Text(), nullable=True))
    else:
        op.add_column("memory_versions", sa.Column("folded_id", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("memory_versions") as batch:
        batch.drop_column("folded_id")
