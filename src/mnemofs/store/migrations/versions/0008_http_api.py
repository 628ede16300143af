"""What the HTTP API needs: store metadata, who redacted, sessions' own fields, admin keys and
session tokens.

- ``memory_stores.metadata``: a JSON object of string pairs (``{}`` for existing stores).
- ``memory_versions.redacted_by``: the actor that redacted a version (NULL: not redacted, or
  redacted before this revision).
- ``sessions.fields``: a JSON object of what a session's creator sent beside its resources.
- ``session_attachments.name`` and ``.description``: the store's as of attach time (filled
  from the stores' current ones for sessions made before).
- ``api_keys`` and ``session_tokens``: credentials, kept as SHA-256 hashes of their secrets.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "memory_stores", sa.Column("metadata", sa.Text(), nullable=False, server_default="{}")
    )
    op.add_column("memory_versions", sa.Column("redacted_by", sa.Text(), nullable=True))
    op.add_column("sessions", sa.Column("fields", sa.Text(), nullable=False, server_default="{}"))
    for column in ("name", "description"):
        op.add_column(
            "session_attachments",
            sa.Column(column, sa.Text(), nullable=False, server_default=""),
        )
        op.execute(
            f"UPDATE session_attachments SET {column} = (SELECT s.{column} FROM memory_stores s "
            "WHERE s.id = session_attachments.store_id)"
        )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("revoked_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
    )
    op.create_table(
        "session_tokens",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_session_tokens_session_id_sessions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_tokens")),
    )
    op.create_index(
        op.f("ix_session_tokens_session_id"), "session_tokens", ["session_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_session_tokens_session_id"), table_name="session_tokens")
    op.drop_table("session_tokens")
    op.drop_table("api_keys")
    with op.batch_alter_table("session_attachments") as batch:
        batch.drop_column("description")
        batch.drop_column("name")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("fields")
    with op.batch_alter_table("memory_versions") as batch:
        batch.drop_column("redacted_by")
    with op.batch_alter_table("memory_stores") as batch:
        batch.drop_column("metadata")
