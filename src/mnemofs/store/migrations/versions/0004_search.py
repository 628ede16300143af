"""Full-text search over live memories' paths and content, kept in step in every transaction.

SQLite: an FTS5 table over ``memories`` (external content: the text is stored once) and three
triggers. PostgreSQL: a generated ``tsvector`` column and a GIN index. Both tokenise without
stemming ('unicode61' / 'simple'): a lexical search, the same on both backends. These objects
are not in ``schema.py`` (SQLAlchemy has no notion of them); ``schema.SEARCH_OBJECTS`` names
them so the schema comparison leaves them out.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SQLITE_UP = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5(path, content, content='memories', "
    "content_rowid='rowid', tokenize='unicode61 remove_diacritics 2')",
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
SQLITE_DOWN = [
    "DROP TRIGGER memories_fts_update",
    "DROP TRIGGER memories_fts_delete",
    "DROP TRIGGER memories_fts_insert",
    "DROP TABLE memories_fts",
]
PG_UP = [
    # The path's words (split like SQLite's tokenizer would, not as one file-path token)
    # weigh more than the content's.
    "ALTER TABLE memories ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    "setweight(to_tsvector('simple', regexp_replace(path, '[^[:alnum:]]+', ' ', 'g')), 'A') || "
    "setweight(to_tsvector('simple', content), 'B')) STORED",
    "CREATE INDEX ix_memories_search_vector ON memories USING GIN (search_vector)",
]
PG_DOWN = [
    "DROP INDEX ix_memories_search_vector",
    "ALTER TABLE memories DROP COLUMN search_vector",
]


def upgrade() -> None:
    for statement in SQLITE_UP if op.get_context().dialect.name == "sqlite" else PG_UP:
        op.execute(statement)


def downgrade() -> None:
    for statement in SQLITE_DOWN if op.get_context().dialect.name == "sqlite" else PG_DOWN:
        op.execute(statement)
