"""PostgreSQL's search index catches up by each store's versions (migration 0015).

A save writes its version and changes only columns of ``memories`` no index holds, so it is a
HOT update; the search vector follows later. What a catch-up has to take in is what each
store's versions say changed past its mark in ``search_marks``: a store's versions commit in
``seq`` order (every writer holds the store's row), so the versions past a mark are exactly
the changes since. A row's ``search_head`` names the version its vector was made from: a row
whose head is another is not taken to match (``SEARCH_CURRENT``), so no search is answered
from a replaced text, whatever has been caught up. See docs/decisions.md, "Saves stay HOT on
PostgreSQL".
"""

from __future__ import annotations

from mnemofs.store.rows import SEQ_END, store_seq_range
from mnemofs.store.tx import Tx

# Stores the index may lag: none taken in yet (new, imported, forked, copied), or a revision
# past its mark's (a change since; or a folder made or removed, which has no version).
STORES_BEHIND = (
    "FROM memory_stores s LEFT JOIN search_marks k ON k.store_id = s.id "
    "WHERE k.store_id IS NULL OR s.revision > k.revision"
)

# What a search counts: a vector made from the row's present head.
SEARCH_CURRENT = "m.search_head = m.head_version_id"

# What an update that moves a memory sets besides its path, by dialect. A new path is a new
# entry in the path's index anyway (no HOT update), and the row's copy would put every word of
# its old vector into the GIN index again (a rename of 4 KiB of prose: ~170 µs of the server's
# time for the vector's entries, ~15 with none); the catch-up makes the vector anew.
MOVED_VECTOR = {"postgresql": "search_vector = NULL, ", "sqlite": ""}

_RANGE = store_seq_range("postgresql")

# One step of a store: its next ``{limit}`` versions past :lo; of their memories, those whose
# vector is not their head's are locked (one a writer holds is skipped: waiting could deadlock
# with a change of many rows) and get a vector. ``taken``: the versions before the first whose
# memory was skipped, which the mark may pass (``upto`` the last of them). The limit is part of
# the text, not a parameter: a plan made without knowing it could not tell a batch of 20 from
# the whole store (``catch_up_marks``).
_TAKE_IN = (
    f"WITH v AS (SELECT seq, memory_id FROM memory_versions WHERE {_RANGE.where} "
    f"ORDER BY {_RANGE.oldest_first} LIMIT {{limit}}), "
    "stale AS (SELECT id FROM memories WHERE id IN (SELECT memory_id FROM v) "
    "AND search_head IS DISTINCT FROM head_version_id), "
    "mine AS (SELECT id FROM memories WHERE id IN (SELECT id FROM stale) "
    "ORDER BY id FOR UPDATE SKIP LOCKED), "
    "made AS (UPDATE memories m SET search_vector = mnemofs_search_vector(m.path, c.content), "
    "search_head = m.head_version_id FROM contents c WHERE c.store_id = m.store_id "
    "AND c.sha256 = m.content_sha256 AND m.id IN (SELECT id FROM mine) RETURNING m.id), "
    "done AS (SELECT seq FROM v WHERE seq < COALESCE((SELECT MIN(seq) FROM v WHERE memory_id "
    "IN (SELECT id FROM stale EXCEPT SELECT id FROM mine)), :hi)) "
    "SELECT (SELECT COUNT(*) FROM v) AS seen, (SELECT COUNT(*) FROM done) AS taken, "
    "(SELECT MAX(seq) FROM done) AS upto, (SELECT COUNT(*) FROM made) AS made"
)

# A mark only moves forward: two processes may catch the same store up at once.
_MARK = (
    "INSERT INTO search_marks (store_id, seq, revision) VALUES (:store, :seq, :revision) "
    "ON CONFLICT (store_id) DO UPDATE SET seq = GREATEST(search_marks.seq, excluded.seq), "
    "revision = GREATEST(search_marks.revision, excluded.revision)"
)

_ALL = 2**62  # no limit, as a LIMIT's parameter


def forget_marks(tx: Tx, store_id: str) -> None:
    """A deleted store's mark goes with it. (Not a foreign key: checking one would take a
    share lock on the store's row, which a catch-up holding rows would then wait for behind a
    writer that locked the store and waits for one of those rows.)"""
    if tx.dialect == "postgresql":
        tx.run("DELETE FROM search_marks WHERE store_id = :id", {"id": store_id})


def catch_up_marks(tx: Tx, batch: int | None) -> int:
    """Take the stores' changes into the index, ``batch`` versions at most (all without one),
    store by store; how many versions were taken. A store whose every version past its mark
    was taken is marked with the revision it had when the look began (a change committed
    since has a later one: that store stays behind). Planned with no whole-table scan (only
    this transaction): a connection keeps its plans, and one made while a table was small
    would scan it for every batch from then on (decisions.md, "A catch-up reads the rows it
    takes in")."""
    if batch is None:
        tx.run("SET LOCAL enable_seqscan = off")
    else:
        # A batch's plan is made once per connection (until an ANALYZE of its tables), not for
        # every batch: the planner made each one anew (a plan for the given mark looked
        # cheaper than one for any mark, in the benchmark's stores every time), and making it
        # cost ~80 µs per change taken in (batches of 20; 25-30% of a catch-up of short notes,
        # decisions.md).
        tx.run(
            "SELECT set_config('enable_seqscan', 'off', true), "
            "set_config('plan_cache_mode', 'force_generic_plan', true)"
        )
    stores = tx.all(f"SELECT s.id, s.revision, k.seq {STORES_BEHIND} ORDER BY s.id")
    taken = 0
    for store in stores:
        room = _ALL if batch is None else batch - taken
        if room <= 0:
            break
        lo = 0 if store.seq is None else store.seq
        step = tx.one(_TAKE_IN.format(limit=room), {"store": store.id, "lo": lo, "hi": SEQ_END})
        finished = step.taken == step.seen < room
        if step.upto is not None or finished or store.seq is None:
            tx.run(
                _MARK,
                {
                    "store": store.id,
                    "seq": lo if step.upto is None else step.upto,
                    "revision": store.revision if finished else -1,
                },
            )
        taken += step.taken
    return taken
