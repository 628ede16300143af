"""Explicit directories' SQL (``directories``, made by mkdir or kept when emptied): what makes
one not empty, how many a store keeps and the room left, and keeping the one a change empties.
"""

from __future__ import annotations

from typing import Any

from mnemofs import limits
from mnemofs.errors import StoreFull
from mnemofs.paths import ROOT, parent_prefix, prefix_upper_bound
from mnemofs.store.tx import Tx

# What makes a directory not empty (``remove_directory``): its first memory, its first
# directory; and the guard that neither exists.
_FIRST_MEMORY_INSIDE = (
    "SELECT path FROM memories WHERE store_id = :store AND path >= :lo AND path < :hi "
    "ORDER BY path LIMIT 1"
)
_FIRST_DIRECTORY_INSIDE = (
    "SELECT path FROM directories WHERE store_id = :store AND path > :lo AND path < :hi "
    "ORDER BY path LIMIT 1"
)
FIRST_INSIDE = (  # either, in one statement
    f"SELECT * FROM ({_FIRST_MEMORY_INSIDE}) AS m UNION ALL "
    f"SELECT * FROM ({_FIRST_DIRECTORY_INSIDE}) AS d LIMIT 1"
)
NOTHING_INSIDE = f"SELECT 1 / (1 - count(*))::int FROM ({FIRST_INSIDE}) AS inside"


# How many directories the store keeps, kept in step with the table by triggers (migration
# 0017): one row read, however many.
_DIRECTORIES_KEPT = "SELECT directory_count FROM memory_stores WHERE id = :store"


# The count is read only when the row is not there yet: once per directory, not per delete.
KEEP_DIRECTORY = (
    "INSERT INTO directories (store_id, path, created_at) SELECT :store, :parent, :now "
    "WHERE NOT EXISTS (SELECT 1 FROM directories WHERE store_id = :store AND path = :parent) "
    f"AND ({_DIRECTORIES_KEPT}) < :most ON CONFLICT DO NOTHING"
)


# The same for a directory removed (rmdir): only when it leaves the one holding it empty.
_KEEP_EMPTIED_DIRECTORY = KEEP_DIRECTORY.replace(
    " ON CONFLICT", f" AND NOT EXISTS ({FIRST_INSIDE}) ON CONFLICT"
)


def directories_full(store_id: str, path: str) -> StoreFull:
    most = limits.MAX_DIRECTORIES_PER_STORE
    return StoreFull(
        f"memory store {store_id} already keeps {most} directories of its own (made by mkdir, "
        f"or kept when emptied), the limit; cannot make {path!r}"
    )


def directories_kept(tx: Tx, store_id: str) -> int:
    """How many directories the store keeps (0 for a store that is not there)."""
    return int(tx.scalar(_DIRECTORIES_KEPT, {"store": store_id}) or 0)


def directory_room(tx: Tx, store_id: str, path: str) -> None:
    """Refuse (``StoreFull``) a directory the store has no room left to keep."""
    if directories_kept(tx, store_id) >= limits.MAX_DIRECTORIES_PER_STORE:
        raise directories_full(store_id, path)


def keep_directory(tx: Tx, store_id: str, path: str, now: str) -> None:
    """Make the directory holding ``path`` explicit, so emptying it does not remove it; when
    the store keeps as many directories as it may, it is not kept (and goes once empty)."""
    parent = parent_prefix(path)
    if parent != ROOT:
        params = {"store": store_id, "parent": parent, "now": now}
        tx.run(KEEP_DIRECTORY, params | {"most": limits.MAX_DIRECTORIES_PER_STORE})


def keep_emptied_directory(tx: Tx, store_id: str, path: str, now: str) -> None:
    """``keep_directory`` after ``path``, a directory, was removed: only if that left the
    directory holding it empty (a removal elsewhere in it keeps no row: rows are counted)."""
    parent = parent_prefix(path)
    if parent != ROOT:
        params: dict[str, Any] = {"store": store_id, "parent": parent, "now": now}
        params |= {"lo": parent, "hi": prefix_upper_bound(parent)}
        tx.run(_KEEP_EMPTIED_DIRECTORY, params | {"most": limits.MAX_DIRECTORIES_PER_STORE})
