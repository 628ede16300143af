"""Initial schema: stores, memories, versions, explicit directories, sessions.

Revision ID: 0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_stores",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.Column("archived_at", sa.Text(), nullable=True),
        sa.Column("memory_count", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_stores")),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.Column("mount_root", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_table(
        "directories",
        sa.Column("store_id", sa.Text(), nullable=False),
        sa.Column(
            "path", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), nullable=False
        ),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["store_id"], ["memory_stores.id"], name=op.f("fk_directories_store_id_memory_stores")
        ),
        sa.PrimaryKeyConstraint("store_id", "path", name=op.f("pk_directories")),
    )
    op.create_table(
        "memories",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("store_id", sa.Text(), nullable=False),
        sa.Column(
            "path", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), nullable=False
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_sha256", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.Column("head_version_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["store_id"], ["memory_stores.id"], name=op.f("fk_memories_store_id_memory_stores")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
        sa.UniqueConstraint("store_id", "path", name=op.f("uq_memories_store_id_path")),
    )
    op.create_table(
        "memory_versions",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("store_id", sa.Text(), nullable=False),
        sa.Column("memory_id", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column(
            "path", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), nullable=False
        ),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_sha256", sa.Text(), nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("redacted_at", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["store_id"],
            ["memory_stores.id"],
            name=op.f("fk_memory_versions_store_id_memory_stores"),
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_memory_versions")),
        sa.UniqueConstraint("id", name=op.f("uq_memory_versions_id")),
    )
    with op.batch_alter_table("memory_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_versions_memory_id_seq"), ["memory_id", "seq"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_memory_versions_store_id_seq"), ["store_id", "seq"], unique=False
        )

    op.create_table(
        "session_attachments",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("store_id", sa.Text(), nullable=False),
        sa.Column("access", sa.Text(), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("slug", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_session_attachments_session_id_sessions")
        ),
        sa.ForeignKeyConstraint(
            ["store_id"],
            ["memory_stores.id"],
            name=op.f("fk_session_attachments_store_id_memory_stores"),
        ),
        sa.PrimaryKeyConstraint("session_id", "position", name=op.f("pk_session_attachments")),
    )
    with op.batch_alter_table("session_attachments", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_session_attachments_store_id"), ["store_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("session_attachments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_session_attachments_store_id"))

    op.drop_table("session_attachments")
    with op.batch_alter_table("memory_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_versions_store_id_seq"))
        batch_op.drop_index(batch_op.f("ix_memory_versions_memory_id_seq"))

    op.drop_table("memory_versions")
    op.drop_table("memories")
    op.drop_table("directories")
    op.drop_table("sessions")
    op.drop_table("memory_stores")
