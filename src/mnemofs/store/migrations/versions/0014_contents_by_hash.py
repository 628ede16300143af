"""Content kept once per store and hash: ``contents``; memories and versions name it.

Before, a memory's row held its content and so did every version of it: a save wrote the text
twice, and a rename, a restore or a revert copied it once more (issue 17). Now each distinct
text of a store is one ``contents`` row, and ``memories.content_sha256`` and
``memory_versions.content_sha256`` (already there) say which. On SQLite the search index reads
its text through the view ``memories_text``, and its notes of what the index holds name the old
content by hash; on PostgreSQL the vector's trigger looks at the hash. See docs/decisions.md,
"Content kept once per hash".

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# "WHERE true": SQLite's parser needs a WHERE before an upsert's ON CONFLICT after a SELECT.
FILL = [
    "INSERT INTO contents (store_id, sha256, content) "
    "SELECT DISTINCT store_id, content_sha256, content FROM memories WHERE true "
    "ON CONFLICT DO NOTHING",
    "INSERT INTO contents (store_id, sha256, content) "
    "SELECT DISTINCT store_id, content_sha256, content FROM memory_versions "
    "WHERE content IS NOT NULL ON CONFLICT DO NOTHING",
]

NOTE_TRIGGERS = ("search_note_insert", "search_note_delete", "search_note_update")

SQLITE_UP = [
    *(f"DROP TRIGGER {name}" for name in NOTE_TRIGGERS),
    "DROP TABLE memories_fts",
    "DROP TABLE search_pending",
    "ALTER TABLE memories DROP COLUMN content",
    "ALTER TABLE memory_versions DROP COLUMN content",
    # What the index holds for each memory row: FTS5 reads a row's text here for snippet()
    # and highlight(), and for 'rebuild' and 'integrity-check'.
    "CREATE VIEW memories_text AS SELECT m.rowid AS rowid, m.path AS path, c.content AS content "
    "FROM memories m JOIN contents c ON c.store_id = m.store_id AND c.sha256 = m.content_sha256",
    "CREATE VIRTUAL TABLE memories_fts USING fts5(path, content, content='memories_text', "
    "content_rowid='rowid', tokenize='unicode61 remove_diacritics 2')",
    # As in 0009, but the index's old text is named by its store and hash: a rename notes no
    # content. A content a note names outlives it (clean-up catches the index up first).
    "CREATE TABLE search_pending (mem_rowid INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, "
    "old_path TEXT, old_store TEXT, old_sha TEXT)",
    "CREATE TRIGGER search_note_insert AFTER INSERT ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed) VALUES (new.rowid, 0); END",
    "CREATE TRIGGER search_note_delete AFTER DELETE ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed, old_path, old_store, old_sha) "
    "VALUES (old.rowid, 1, old.path, old.store_id, old.content_sha256); END",
    "CREATE TRIGGER search_note_update AFTER UPDATE OF path, content_sha256 ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed, old_path, old_store, old_sha) "
    "VALUES (old.rowid, 1, old.path, old.store_id, old.content_sha256); END",
    "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
]

SQLITE_DOWN = [
    *(f"DROP TRIGGER {name}" for name in NOTE_TRIGGERS),
    "DROP TABLE memories_fts",
    "DROP TABLE search_pending",
    "DROP VIEW memories_text",
    "ALTER TABLE memories ADD COLUMN content TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE memory_versions ADD COLUMN content TEXT",
    "UPDATE memories SET content = (SELECT c.content FROM contents c "
    "WHERE c.store_id = memories.store_id AND c.sha256 = memories.content_sha256)",
    "UPDATE memory_versions SET content = (SELECT c.content FROM contents c "
    "WHERE c.store_id = memory_versions.store_id AND c.sha256 = memory_versions.content_sha256) "
    "WHERE content_sha256 IS NOT NULL",
    "DROP TABLE contents",
    "CREATE VIRTUAL TABLE memories_fts USING fts5(path, content, content='memories', "
    "content_rowid='rowid', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TABLE search_pending (mem_rowid INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, "
    "old_path TEXT, old_content TEXT)",
    "CREATE TRIGGER search_note_insert AFTER INSERT ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed) VALUES (new.rowid, 0); END",
    "CREATE TRIGGER search_note_delete AFTER DELETE ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed, old_path, old_content) "
    "VALUES (old.rowid, 1, old.path, old.content); END",
    "CREATE TRIGGER search_note_update AFTER UPDATE OF path, content ON memories BEGIN "
    "INSERT OR IGNORE INTO search_pending (mem_rowid, indexed, old_path, old_content) "
    "VALUES (old.rowid, 1, old.path, old.content); END",
    "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
]

PG_TRIGGER = (
    "CREATE TRIGGER search_note_change BEFORE UPDATE OF path, {column} ON memories "
    "FOR EACH ROW WHEN (OLD.path IS DISTINCT FROM NEW.path "
    "OR OLD.{column} IS DISTINCT FROM NEW.{column}) EXECUTE FUNCTION mnemofs_search_stale()"
)

PG_UP = [
    "DROP TRIGGER search_note_change ON memories",
    "ALTER TABLE memories DROP COLUMN content",
    "ALTER TABLE memory_versions DROP COLUMN content",
    PG_TRIGGER.format(column="content_sha256"),
]

PG_DOWN = [
    "DROP TRIGGER search_note_change ON memories",
    "ALTER TABLE memories ADD COLUMN content text",
    "ALTER TABLE memory_versions ADD COLUMN content text",
    "UPDATE memories m SET content = c.content FROM contents c "
    "WHERE c.store_id = m.store_id AND c.sha256 = m.content_sha256",
    "UPDATE memory_versions v SET content = c.content FROM contents c "
    "WHERE c.store_id = v.store_id AND c.sha256 = v.content_sha256",
    "ALTER TABLE memories ALTER COLUMN content SET NOT NULL",
    "DROP TABLE contents",
    PG_TRIGGER.format(column="content"),
]


def upgrade() -> None:
    op.create_table(
        "contents",
        sa.Column("store_id", sa.Text(), sa.ForeignKey("memory_stores.id"), nullable=False),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("store_id", "sha256"),
    )
    for statement in FILL:
        op.execute(statement)
    sqlite = op.get_context().dialect.name == "sqlite"
    for statement in SQLITE_UP if sqlite else PG_UP:
        op.execute(statement)


def downgrade() -> None:
    sqlite = op.get_context().dialect.name == "sqlite"
    for statement in SQLITE_DOWN if sqlite else PG_DOWN:
        op.execute(statement)
