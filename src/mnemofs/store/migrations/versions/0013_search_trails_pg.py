"""PostgreSQL: the search index trails saves too, as on SQLite since 0009.

0004's generated ``search_vector`` was computed inside every insert and every update of a
memory's path or content: for 4 KiB of prose ~0.7 ms of the server's time per save, more than
the rest of the save (measured: 1,000 updates of a generated column 670-790 ms, of the same
table without it 3-60 ms). Now ``search_vector`` is a plain column: a trigger empties it (NULL)
when a row's path or content changes, a new row starts without one, and
``ServiceBase.catch_up_search`` fills the empty ones in batches (a partial index finds them),
about a second after a process's writes and before every search, so no search sees a stale
vector. ``mnemofs_search_vector`` is the one definition of what is indexed. See
docs/decisions.md, "Search trails saves".

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# The path's words (split like SQLite's tokenizer would) weigh more than the content's (0004).
VECTOR = (
    "setweight(to_tsvector('simple', regexp_replace(path, '[^[:alnum:]]+', ' ', 'g')), 'A') || "
    "setweight(to_tsvector('simple', content), 'B')"
)

PG_UP = [
    "CREATE FUNCTION mnemofs_search_vector(path text, content text) RETURNS tsvector "
    f"LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {VECTOR} $$",
    "ALTER TABLE memories DROP COLUMN search_vector",  # and its index
    "ALTER TABLE memories ADD COLUMN search_vector tsvector",
    "UPDATE memories SET search_vector = mnemofs_search_vector(path, content)",
    "CREATE INDEX ix_memories_search_vector ON memories USING GIN (search_vector)",
    "CREATE INDEX ix_memories_search_stale ON memories (id) WHERE search_vector IS NULL",
    "CREATE FUNCTION mnemofs_search_stale() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN NEW.search_vector := NULL; RETURN NEW; END $$",
    "CREATE TRIGGER search_note_change BEFORE UPDATE OF path, content ON memories "
    "FOR EACH ROW WHEN (OLD.path IS DISTINCT FROM NEW.path "
    "OR OLD.content IS DISTINCT FROM NEW.content) EXECUTE FUNCTION mnemofs_search_stale()",
]

PG_DOWN = [
    "DROP TRIGGER search_note_change ON memories",
    "DROP FUNCTION mnemofs_search_stale()",
    "DROP INDEX ix_memories_search_stale",
    "ALTER TABLE memories DROP COLUMN search_vector",
    f"ALTER TABLE memories ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({VECTOR}) STORED",
    "CREATE INDEX ix_memories_search_vector ON memories USING GIN (search_vector)",
    "DROP FUNCTION mnemofs_search_vector(text, text)",
]


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for statement in PG_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for statement in PG_DOWN:
            op.execute(statement)
