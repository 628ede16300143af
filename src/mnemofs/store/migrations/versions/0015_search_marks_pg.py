"""PostgreSQL: the search index finds what changed by each store's versions, not by a trigger.

Since 0013 a trigger emptied a memory's ``search_vector`` whenever its path or content changed.
That column is indexed (GIN, and the partial index of empty ones), so no save could be a HOT
update: every save wrote new entries into all four indexes of ``memories`` and left a dead
row behind them for vacuum, and the trigger ran for each (measured through a mount: an append's
writes statement 125 µs with it, 69 without). A save now changes only columns no index holds.

What the index has yet to take is found from the versions every change writes anyway:
``search_marks`` keeps, per store, the ``seq`` up to which its versions are reflected in the
vectors and the store's ``revision`` once all were (a store whose revision moved past its mark
has work, or had a change without a version: a folder). A store's versions commit in ``seq``
order (its writers hold its row), so what is past the mark is exactly what is new.
``memories.search_head`` is the version a row's vector was made from: a search counts a
vector only while it is the row's head's, so a change not yet taken in is never matched by
the text it replaced. See docs/decisions.md, "Saves stay HOT on PostgreSQL".

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

PG_UP = [
    "DROP TRIGGER search_note_change ON memories",
    "DROP FUNCTION mnemofs_search_stale()",
    "UPDATE memories m SET search_vector = mnemofs_search_vector(m.path, c.content) "
    "FROM contents c WHERE c.store_id = m.store_id AND c.sha256 = m.content_sha256 "
    "AND m.search_vector IS NULL",
    "DROP INDEX ix_memories_search_stale",
    "ALTER TABLE memories ADD COLUMN search_head text",
    "UPDATE memories SET search_head = head_version_id",
    # No foreign key: its check would share-lock the store's row (``searchmarks.forget_marks``).
    "CREATE TABLE search_marks (store_id text PRIMARY KEY, seq bigint NOT NULL, "
    "revision bigint NOT NULL)",
    "INSERT INTO search_marks (store_id, seq, revision) SELECT s.id, "
    "COALESCE((SELECT MAX(v.seq) FROM memory_versions v WHERE v.store_id = s.id), 0), "
    "s.revision FROM memory_stores s",
]

PG_DOWN = [
    "DROP TABLE search_marks",
    "UPDATE memories SET search_vector = NULL WHERE search_head IS DISTINCT FROM head_version_id",
    "ALTER TABLE memories DROP COLUMN search_head",
    "CREATE INDEX ix_memories_search_stale ON memories (id) WHERE search_vector IS NULL",
    "CREATE FUNCTION mnemofs_search_stale() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN NEW.search_vector := NULL; RETURN NEW; END $$",
    "CREATE TRIGGER search_note_change BEFORE UPDATE OF path, content_sha256 ON memories "
    "FOR EACH ROW WHEN (OLD.path IS DISTINCT FROM NEW.path "
    "OR OLD.content_sha256 IS DISTINCT FROM NEW.content_sha256) "
    "EXECUTE FUNCTION mnemofs_search_stale()",
]


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for statement in PG_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for statement in PG_DOWN:
            op.execute(statement)
