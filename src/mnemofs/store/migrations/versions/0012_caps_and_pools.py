"""Per-store caps and capacity pools (issue 20, seed 001).

- ``memory_stores.max_memories`` / ``max_content_bytes``: a store's own limits, lower than the
  global ones (NULL: the global limit).
- ``capacity_pools``: a named group of stores that share one capacity (``max_memories`` over
  all of them) and what a create does when it is reached (``refuse`` or ``evict-lru``, the
  least recently accessed memory of the whole pool). ``memory_stores.pool_id`` says which
  pool a store is in (NULL: none).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capacity_pools",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("max_memories", sa.Integer(), nullable=False),
        sa.Column("on_full", sa.Text(), nullable=False, server_default="refuse"),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_capacity_pools")),
    )
    # Plain ADD COLUMN on both: rebuilding memory_stores on SQLite (batch mode) would drop a
    # table that every other table references.
    op.add_column("memory_stores", sa.Column("max_memories", sa.Integer(), nullable=True))
    op.add_column("memory_stores", sa.Column("max_content_bytes", sa.Integer(), nullable=True))
    fk = "fk_memory_stores_pool_id_capacity_pools"
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            f"ALTER TABLE memory_stores ADD COLUMN pool_id TEXT CONSTRAINT {fk} "
            "REFERENCES capacity_pools (id)"
        )
    else:
        op.add_column("memory_stores", sa.Column("pool_id", sa.Text(), nullable=True))
        op.create_foreign_key(fk, "memory_stores", "capacity_pools", ["pool_id"], ["id"])
    op.create_index("ix_memory_stores_pool_id", "memory_stores", ["pool_id"])


def downgrade() -> None:
    with op.batch_alter_table("memory_stores") as batch:
        batch.drop_index("ix_memory_stores_pool_id")
        batch.drop_constraint("fk_memory_stores_pool_id_capacity_pools", type_="foreignkey")
        batch.drop_column("pool_id")
        batch.drop_column("max_content_bytes")
        batch.drop_column("max_memories")
    op.drop_table("capacity_pools")
