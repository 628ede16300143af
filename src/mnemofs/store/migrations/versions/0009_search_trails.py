"""SQLite: the search index trails saves instead of changing in their transaction.

The FTS5 triggers of 0004 re-indexed a memory inside every save, and FTS5 writes a new index
segment per transaction: that was a third of a save's time. Now the triggers only note, in
``search_pending``, which memory rows changed and what the index still holds for them (the path
and content as last indexed); ``ServiceBase.catch_up_search`` moves those notes into the index
in batches, and every search catches up first, so no search ever sees a stale index. See
docs/decisions.md, "Search trails saves". PostgreSQL keeps its generated column (0004).

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OLD_TRIGGERS = ("memories_fts_insert", "memories_fts_delete", "memories_fts_update")

SQLITE_UP = [
    *(f"DROP TRIGGER {name}" for name in OLD_TRIGGERS),
    # One row per memories.rowid whose index entry is out of date. indexed = 1: the index
    # holds old_path/old_content for that rowid (what a 'delete' command needs); 0: nothing.
    "CREATE TABLE search_pending (mem_rowid INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, "
    "old_path TEXT, old_content TEXT)",
    # The first note for a rowid wins: it says what the index holds until the next catch-up.
    "CREATE TRIGGER search_note_insert AFTER INSERT ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed) VALUES (new.rowid, 0); END",
    "CREATE TRIGGER search_note_delete AFTER DELETE ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed, old_path, old_content) "
    "VALUES (old.rowid, 1, old.path, old.content); END",
    "CREATE TRIGGER search_note_update AFTER UPDATE OF path, content ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed, old_path, old_content) "
    "VALUES (old.rowid, 1, old.path, old.content); END",
]

SQLITE_DOWN = [
    "DROP TRIGGER search_note_insert",
    "DROP TRIGGER search_note_delete",
    "DROP TRIGGER search_note_update",
    "DROP TABLE search_pending",
    "CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, path, content) VALUES (new.rowid, new.path, new.content); "
    "END",
    "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, path, content) "
    "VALUES ('delete', old.rowid, old.path, old.content); END",
    "CREATE TRIGGER memories_fts_update AFTER UPDATE OF path, content ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, path, content) "
    "VALUES ('delete', old.rowid, old.path, old.content); "
    "INSERT INTO memories_fts(rowid, path, content) VALUES (new.rowid, new.path, new.content); "
    "END",
    "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
]


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        for statement in SQLITE_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        for statement in SQLITE_DOWN:
            op.execute(statement)
