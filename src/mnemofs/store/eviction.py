"""Making room when a store or a capacity pool is full (``evict-lru``), or saying why not.

Called from ``ServiceBase._change_store`` inside the create's transaction, with the store
locked (and, for a pool on PostgreSQL, the pool's row locked before the store's, so concurrent
creates in different stores of one pool queue on it, never overshoot its capacity and never
deadlock evicting from each other's stores).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemofs.errors import StoreFull
from mnemofs.store.rows import EVICT_ACTOR, utc_now
from mnemofs.store.tx import Tx

if TYPE_CHECKING:
    from mnemofs.store.base import ServiceBase


def pool_room(
    service: ServiceBase, tx: Tx, pool_id: str, room_for: str, *, adding: int = 0
) -> None:
    """After a create counted in a pooled store (``adding``: creates not counted yet):
    within the pool's capacity, or evict the pool's least recently accessed memories to
    get there ('evict-lru'), or refuse."""
    lock = " FOR UPDATE" if tx.dialect == "postgresql" else ""
    pool = tx.one(
        f"SELECT name, max_memories, on_full FROM capacity_pools WHERE id = :id{lock}",
        {"id": pool_id},
    )
    total = adding + int(
        tx.scalar(
            "SELECT SUM(memory_count) FROM memory_stores WHERE pool_id = :id", {"id": pool_id}
        )
    )
    while total > pool.max_memories:
        victim = None
        if pool.on_full == "evict-lru":
            service._flush_accesses(tx)
            if tx.dialect == "postgresql":
                # Planned without whole-table scans (this transaction's other queries all have
                # an index): the planner takes a store's memories to be an even share of all,
                # and with few stores in the database it read every memory to find the pool's
                # (an evicting create beside 42,000 others: 24 ms, growing with them; 2 ms
                # through the stores' index).
                tx.run("SET LOCAL enable_seqscan = off")
            victim = tx.one(
                "SELECT m.id, m.path, m.store_id FROM memories m JOIN memory_stores s "
                "ON s.id = m.store_id WHERE s.pool_id = :id AND s.archived_at IS NULL "
                "ORDER BY COALESCE(m.accessed_at, m.updated_at), m.id LIMIT 1",
                {"id": pool_id},
            )
        if victim is None:
            raise StoreFull(
                f"capacity pool {pool.name!r} ({pool_id}) already holds {pool.max_memories} "
                f"memories, its capacity; cannot create {room_for!r}"
            )
        service._remove_memory(
            tx, victim.store_id, victim, EVICT_ACTOR, utc_now(), keep_directory=False
        )
        service._lock_only(tx, victim.store_id, -1)()
        service.evictions += 1
        total -= 1


def evict_lru(service: ServiceBase, tx: Tx, store_id: str) -> bool:
    """Delete the store's least recently accessed memory (a 'deleted' version by actor
    'evict'); False if there is none. The store is locked and full."""
    service._flush_accesses(tx)  # this process's reads count before choosing
    victim = tx.one(
        "SELECT id, path FROM memories WHERE store_id = :store "
        "ORDER BY COALESCE(accessed_at, updated_at), id LIMIT 1",
        {"store": store_id},
    )
    if victim is None:
        return False
    service._remove_memory(tx, store_id, victim, EVICT_ACTOR, utc_now(), keep_directory=False)
    service.evictions += 1
    tx.run(
        "UPDATE memory_stores SET memory_count = memory_count - 1 WHERE id = :id",
        {"id": store_id},
    )
    return True
