"""Capacity pools and per-store caps (issue 20, seed 001).

A pool is a named group of stores sharing one capacity: at most ``max_memories`` live
memories over all of them. ``on_full`` says what a create in a full pool does: ``refuse``
(``StoreFull``: ENOSPC, 413... as a full store) or ``evict-lru`` (delete the least recently
accessed memory of the whole pool first, a ``deleted`` version by ``evict``, in the same
transaction; ``eviction.pool_room``). A store is in at most one pool.

Caps are never lowered under what is there: a pool or store cap below its count is refused
(or, with ``evict=True`` where the policy is ``evict-lru``, the excess is evicted now, least
recently accessed first); a store's size cap below its largest memory is refused.
"""

from __future__ import annotations

from mnemofs import limits
from mnemofs.errors import Conflict, InvalidRequest, NotFound
from mnemofs.models import POOL_PREFIX, CapacityPool, OnFull, StoreId, new_id
from mnemofs.store import eviction
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import _validate_on_full, _validate_store_name, utc_now
from mnemofs.store.tx import Tx


def validate_cap(value: object, what: str, most: int) -> int | None:
    """A cap: None (the global limit) or 1..``most``."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidRequest(f"{what} must be between 1 and {most:,}, got {value!r}")
    return value


class PoolsMixin(ServiceBase):
    """Capacity pools: create, read, update, delete; stores in and out (search: recall.py)."""

    def create_pool(
        self, name: str, max_memories: int, *, on_full: OnFull = "refuse"
    ) -> CapacityPool:
        name = _validate_store_name(name)
        cap = validate_cap(max_memories, "max_memories", 10 * limits.MAX_MEMORIES_PER_STORE**2)
        on_full = _validate_on_full(on_full)
        pool_id = new_id(POOL_PREFIX)

        def run(tx: Tx) -> CapacityPool:
            tx.run(
                "INSERT INTO capacity_pools (id, name, max_memories, on_full, created_at) "
                "VALUES (:id, :name, :cap, :on_full, :now)",
                {"id": pool_id, "name": name, "cap": cap, "on_full": on_full, "now": utc_now()},
            )
            return self._pool(tx, pool_id)

        result: CapacityPool = self._write(run)
        return result

    def get_pool(self, pool_id: str) -> CapacityPool:
        return self._read(lambda tx: self._pool(tx, pool_id))

    def resolve_pool(self, ref: str) -> str:
        """A pool id from its id or its exact name."""

        def run(tx: Tx) -> str:
            rows = tx.all(
                "SELECT id FROM capacity_pools WHERE id = :ref OR name = :ref", {"ref": ref}
            )
            if not rows:
                raise NotFound(f"capacity pool {ref!r} not found")
            if len(rows) > 1:
                raise InvalidRequest(f"several pools are named {ref!r}: give its id")
            return str(rows[0].id)

        return self._read(run)

    def list_pools(self) -> list[CapacityPool]:
        def run(tx: Tx) -> list[CapacityPool]:
            ids = [r.id for r in tx.all("SELECT id FROM capacity_pools ORDER BY created_at, id")]
            return [self._pool(tx, i) for i in ids]

        return self._read(run)

    def update_pool(
        self,
        pool_id: str,
        *,
        max_memories: int | None = None,
        on_full: OnFull | None = None,
        evict: bool = False,
    ) -> CapacityPool:
        """A new capacity or policy. Lowering the capacity under what the pool holds is refused,
        unless the pool evicts and ``evict`` is given: then the excess goes now."""
        cap = validate_cap(max_memories, "max_memories", 10 * limits.MAX_MEMORIES_PER_STORE**2)
        if on_full is not None:
            on_full = _validate_on_full(on_full)

        def run(tx: Tx) -> CapacityPool:
            pool = self._pool(tx, pool_id, lock=True)
            policy = on_full or pool.on_full
            new_cap = pool.max_memories if cap is None else cap
            excess = pool.memory_count - new_cap
            if excess > 0:
                if policy != "evict-lru" or not evict:
                    how = (
                        "pass evict=True (--evict) to evict them now, least recently accessed first"
                        if policy == "evict-lru"
                        else "delete memories first, or make it evict-lru and pass --evict"
                    )
                    raise Conflict(
                        f"capacity pool {pool.name!r} holds {pool.memory_count} memories: a "
                        f"capacity of {new_cap} would evict {excess}; {how}"
                    )
                tx.run(
                    "UPDATE capacity_pools SET max_memories = :cap, on_full = :on_full "
                    "WHERE id = :id",
                    {"cap": new_cap, "on_full": policy, "id": pool_id},
                )
                eviction.pool_room(self, tx, pool_id, "(the lower capacity)")
            tx.run(
                "UPDATE capacity_pools SET max_memories = :cap, on_full = :on_full WHERE id = :id",
                {"cap": new_cap, "on_full": policy, "id": pool_id},
            )
            return self._pool(tx, pool_id)

        result: CapacityPool = self._write(run)
        return result

    def set_pool(self, store_ids: list[str], pool_id: str | None) -> CapacityPool | None:
        """Put stores in ``pool_id`` (out of any pool with None). A store already in another
        pool, or stores that would take the pool over its capacity, are refused."""

        def run(tx: Tx) -> CapacityPool | None:
            pool = None if pool_id is None else self._pool(tx, pool_id, lock=True)
            adding = 0
            for store_id in store_ids:
                row = self._lock_store(tx, store_id)
                if pool_id is not None and row.pool_id not in (None, pool_id):
                    raise Conflict(
                        f"store {row.name!r} ({store_id}) is in pool {row.pool_id} already: take "
                        "it out first"
                    )
                if row.pool_id != pool_id:
                    adding += row.memory_count
                tx.run(
                    "UPDATE memory_stores SET pool_id = :pool, revision = revision + 1 "
                    "WHERE id = :id",
                    {"pool": pool_id, "id": store_id},
                )
            if pool is not None and pool.memory_count + adding > pool.max_memories:
                raise Conflict(
                    f"capacity pool {pool.name!r} holds {pool.memory_count} of "
                    f"{pool.max_memories} memories: these stores would add {adding}"
                )
            return None if pool_id is None else self._pool(tx, pool_id)

        result: CapacityPool | None = self._write(run)
        return result

    def delete_pool(self, pool_id: str) -> None:
        """Remove a pool; its stores keep their memories and their own caps."""

        def run(tx: Tx) -> None:
            self._pool(tx, pool_id, lock=True)
            tx.run("UPDATE memory_stores SET pool_id = NULL WHERE pool_id = :id", {"id": pool_id})
            tx.run("DELETE FROM capacity_pools WHERE id = :id", {"id": pool_id})

        self._write(run)

    def _pool(self, tx: Tx, pool_id: str, *, lock: bool = False) -> CapacityPool:
        sql = (
            "SELECT id, name, max_memories, on_full, created_at FROM capacity_pools WHERE id = :id"
        )
        row = tx.one(
            sql + (" FOR UPDATE" if lock and tx.dialect == "postgresql" else ""), {"id": pool_id}
        )
        if row is None:
            raise NotFound(f"capacity pool {pool_id!r} not found")
        stores = tx.all(
            "SELECT id, memory_count FROM memory_stores WHERE pool_id = :id ORDER BY id",
            {"id": pool_id},
        )
        return CapacityPool(
            id=row.id,
            name=row.name,
            max_memories=row.max_memories,
            on_full=row.on_full,
            created_at=row.created_at,
            memory_count=sum(s.memory_count for s in stores),
            memory_store_ids=[StoreId(s.id) for s in stores],
        )
