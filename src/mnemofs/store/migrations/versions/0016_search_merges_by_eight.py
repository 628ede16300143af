"""SQLite: the search index merges its segments eight at a time, not four.

FTS5 writes each catch-up batch as a new segment and, with every batch, merges levels that
hold ``automerge`` segments (4 by default) into the next. For notes of prose that merging was
as costly as the indexing itself: 20,000 windows of 4 KiB of made-up words taken in 100 at a
time, batches alternated between two indexes in one process, cost 215-352 µs a note at 4 and
150-210 at 8, and taking notes out (a delete, the old half of a rename or an overwrite) 13-17%
less; one-word searches with snippets level (6-10 ms either way over 20,000 notes), since a
level now holds up to eight segments instead of four. Through a mount, notes of prose saved
back to back spend a third to half of a burst waiting behind the index's batches; this is the
cheapest part of that to take off (docs/decisions.md, "The search index merges by eight").
Below ``crisismerge`` (16), so no batch is made to merge a whole level at once.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

SEARCH_AUTOMERGE = 8  # FTS5's default is 4


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute(
            f"INSERT INTO memories_fts(memories_fts, rank) VALUES ('automerge', {SEARCH_AUTOMERGE})"
        )


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('automerge', 4)")
