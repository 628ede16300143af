"""Deleted memories found by their last path: the mount's ``.history`` (issue 19).

A live memory is found at its path by ``memories``' unique index; a deleted one only by its
``deleted`` version, which holds its last path. This partial index covers exactly those rows,
so a save (which never writes a ``deleted`` version) pays nothing for it.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

WHERE = sa.text("operation = 'deleted'")


def upgrade() -> None:
    op.create_index(
        "ix_memory_versions_deleted_path",
        "memory_versions",
        ["store_id", "path"],
        sqlite_where=WHERE,
        postgresql_where=WHERE,
    )


def downgrade() -> None:
    op.drop_index("ix_memory_versions_deleted_path", table_name="memory_versions")
