"""Where memory text lives: each distinct text of a store once, in ``contents``, named by hash
from memories and versions (migration 0014); and the search index over the memories' texts,
which trails saves (SQLite: 0009, PostgreSQL: 0013 and 0015) and is caught up in batches."""

from __future__ import annotations

from mnemofs.content import Content
from mnemofs.store.searchmarks import STORES_BEHIND, catch_up_marks
from mnemofs.store.tx import Tx


def _content_of(table: str) -> str:
    """The column ``content`` of a row of ``memories`` or ``memory_versions`` (``table``: its
    name or alias in the query): its store's text with its hash (NULL for a version without
    one). A subquery rather than a join, so that every query keeps its shape."""
    return (
        f"(SELECT c.content FROM contents c WHERE c.store_id = {table}.store_id "
        f"AND c.sha256 = {table}.content_sha256) AS content"
    )


_MEMORY_CONTENT = _content_of("memories")
_VERSION_CONTENT = _content_of("memory_versions")


# The tables whose rows (or index entries) hold memory content or paths.
CONTENT_TABLES = ("contents", "memories", "memory_versions", "directories", "memory_stores")


# A text kept, before the rows that name it (nothing if the store has it already).
_CONTENT_INSERT = (
    "INSERT INTO contents (store_id, sha256, content) VALUES (:store, :sha, :content) "
    "ON CONFLICT DO NOTHING"
)


def _put_content(tx: Tx, store_id: str, *texts: Content) -> None:
    """Keep texts in their store's ``contents`` (nothing for one that is there already),
    before the rows that name them by hash. One ``run`` each, not ``many``: on a PostgreSQL
    pipeline that waits for no answer, so a save's round trips stay as they were."""
    for t in texts:
        tx.run(_CONTENT_INSERT, {"store": store_id, "sha": t.sha256, "content": t.text})


def _sweep_contents(tx: Tx, store_id: str | None) -> int:
    """Remove the texts no memory and no version names any more, of one store or (None) of
    all: after a redaction, a prune, a store's deletion, or what folds left (``db scrub``);
    how many went. The search index is caught up first: its notes may name an old text until
    then. Rare and by an admin: one pass over the store."""
    _catch_up_search(tx)
    mine = "" if store_id is None else " AND store_id = :store"
    return tx.count(
        "DELETE FROM contents WHERE (store_id, sha256) NOT IN "
        f"(SELECT store_id, content_sha256 FROM memories WHERE true{mine}) "
        "AND (store_id, sha256) NOT IN (SELECT store_id, content_sha256 FROM memory_versions "
        f"WHERE content_sha256 IS NOT NULL{mine}){mine}",
        {"store": store_id},
    )


def _catch_up_search(tx: Tx, batch: int | None = None) -> int:
    """Bring the search index up to date, ``batch`` changes at most (all without one); returns
    how many were taken. SQLite: the changes its triggers noted in ``search_pending``
    (migration 0009), oldest first; each noted row first leaves the FTS5 index as the note
    says the index holds it, then enters it as ``memories`` holds it now, if it still exists.
    PostgreSQL: each store's versions past its mark (migration 0015, ``searchmarks``)."""
    if tx.dialect != "sqlite":
        return catch_up_marks(tx, batch)
    limit = "" if batch is None else f" ORDER BY mem_rowid LIMIT {int(batch)}"
    last = tx.scalar(f"SELECT MAX(mem_rowid) FROM (SELECT mem_rowid FROM search_pending{limit})")
    if last is None:
        return 0
    upto = {"last": last}
    tx.run(
        "INSERT INTO memories_fts (memories_fts, rowid, path, content) "
        "SELECT 'delete', p.mem_rowid, p.old_path, c.content FROM search_pending p "
        "JOIN contents c ON c.store_id = p.old_store AND c.sha256 = p.old_sha "
        "WHERE p.indexed = 1 AND p.mem_rowid <= :last",
        upto,
    )
    # CROSS JOIN keeps the notes the outer loop (SQLite's way to fix a join's order): with a
    # plain JOIN the planner walked every memory up to :last and looked each up in the notes,
    # ~6-10 ms a batch in a store of 10,000 memories however few notes there were.
    tx.run(
        "INSERT INTO memories_fts (rowid, path, content) SELECT m.rowid, m.path, c.content "
        "FROM search_pending p CROSS JOIN memories m ON m.rowid = p.mem_rowid "
        "JOIN contents c ON c.store_id = m.store_id AND c.sha256 = m.content_sha256 "
        "WHERE p.mem_rowid <= :last",
        upto,
    )
    return tx.count("DELETE FROM search_pending WHERE mem_rowid <= :last", upto)


def _search_pending(tx: Tx) -> bool:
    if tx.dialect == "sqlite":
        return tx.scalar("SELECT 1 FROM search_pending LIMIT 1") is not None
    return tx.scalar(f"SELECT 1 {STORES_BEHIND} LIMIT 1") is not None


def _purge_search_index(tx: Tx) -> None:
    """SQLite: take in every noted change, then merge the FTS5 index into one segment. A
    delete only adds a tombstone; the deleted text's tokens stay in older segments until a
    merge drops them (and secure_delete zeroes the pages they were on), and the notes of
    ``search_pending`` hold old text until taken in. Costs a rewrite of the whole index:
    erasing changes only."""
    if tx.dialect == "sqlite":
        _catch_up_search(tx)
        tx.run("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
