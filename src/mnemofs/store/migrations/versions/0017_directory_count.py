"""The directories a store keeps, counted in its row: ``memory_stores.directory_count``.

A store keeps at most ``MAX_DIRECTORIES_PER_STORE`` directories of its own, and every mkdir
(and every delete that keeps the directory it empties) asked the ``directories`` table how
many there were: an index range read, ~10 µs at 200 directories but ~300 µs at 6,000 and ~1 ms
at 9,000 in one process. Triggers keep the count in step with the table, whichever statement
adds or removes a row (mkdir, rmdir, a directory's rename, keeping an emptied directory,
imports, forks, restores, a store's removal), so no code path can forget it.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

COUNT_ALL = (
    "UPDATE memory_stores SET directory_count = "
    "(SELECT count(*) FROM directories d WHERE d.store_id = memory_stores.id)"
)

SQLITE_UP = [
    "CREATE TRIGGER directory_count_insert AFTER INSERT ON directories BEGIN "
    "UPDATE memory_stores SET directory_count = directory_count + 1 WHERE id = new.store_id; END",
    "CREATE TRIGGER directory_count_delete AFTER DELETE ON directories BEGIN "
    "UPDATE memory_stores SET directory_count = directory_count - 1 WHERE id = old.store_id; END",
    "CREATE TRIGGER directory_count_update AFTER UPDATE OF store_id ON directories BEGIN "
    "UPDATE memory_stores SET directory_count = directory_count - 1 WHERE id = old.store_id; "
    "UPDATE memory_stores SET directory_count = directory_count + 1 WHERE id = new.store_id; END",
]
SQLITE_DOWN = [
    f"DROP TRIGGER {name}"
    for name in ("directory_count_insert", "directory_count_delete", "directory_count_update")
]

PG_UP = [
    "CREATE FUNCTION mnemofs_directory_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP <> 'INSERT' THEN UPDATE memory_stores SET directory_count = directory_count - 1 "
    "WHERE id = OLD.store_id; END IF; "
    "IF TG_OP <> 'DELETE' THEN UPDATE memory_stores SET directory_count = directory_count + 1 "
    "WHERE id = NEW.store_id; END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER directory_count AFTER INSERT OR DELETE OR UPDATE OF store_id ON directories "
    "FOR EACH ROW EXECUTE FUNCTION mnemofs_directory_count()",
]
PG_DOWN = ["DROP TRIGGER directory_count ON directories", "DROP FUNCTION mnemofs_directory_count()"]


def upgrade() -> None:
    op.add_column(
        "memory_stores",
        sa.Column("directory_count", sa.Integer(), nullable=False, server_default="0"),
    )
    postgres = op.get_context().dialect.name == "postgresql"
    for statement in [COUNT_ALL, *(PG_UP if postgres else SQLITE_UP)]:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    for statement in PG_DOWN if postgres else SQLITE_DOWN:
        op.execute(statement)
    op.execute("ALTER TABLE memory_stores DROP COLUMN directory_count")
