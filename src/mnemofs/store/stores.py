"""Memory stores: create, read, list, update, archive, delete."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from mnemofs import limits
from mnemofs.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
)
from mnemofs.models import (
    STORE_KINDS,
    STORE_PREFIX,
    MemoryStore,
    OnFull,
    Page,
    SecretsPolicy,
    StoreId,
    StoreKind,
    new_id,
)
from mnemofs.store import eviction
from mnemofs.store.base import ServiceBase
from mnemofs.store.directories import directories_kept
from mnemofs.store.pools import validate_cap
from mnemofs.store.rows import (
    _STORE_COLS,
    _decode_cursor,
    _encode_cursor,
    _placeholders,
    _store,
    _validate_description,
    _validate_limit,
    _validate_metadata,
    _validate_on_full,
    _validate_secrets,
    _validate_store_name,
    _validate_time,
    _validate_user,
    utc_now,
)
from mnemofs.store.searchmarks import forget_marks
from mnemofs.store.texts import _purge_search_index, _sweep_contents
from mnemofs.store.tx import Tx


class StoresMixin(ServiceBase):
    """Memory stores: create, read, list, update, archive, delete."""

    def create_store(
        self,
        name: str,
        description: str = "",
        *,
        kind: StoreKind = "memory",
        owner: str = "",
        on_full: OnFull = "refuse",
        secrets: SecretsPolicy = "refuse",
        metadata: Mapping[str, str] | None = None,
        max_memories: int | None = None,
        max_content_bytes: int | None = None,
    ) -> MemoryStore:
        """A new store with ``metadata`` (string pairs for the caller's bookkeeping);
        ``kind='journal'`` makes a turn journal (see ``append_journal``); ``owner`` gives it to
        one end user (``""``: a general store); ``secrets='allow'`` stores content that holds
        credentials (refused by default, see ``mnemofs.secrets``)."""
        name = _validate_store_name(name)
        description = _validate_description(description)
        if kind not in STORE_KINDS:
            raise InvalidRequest(f"store kind {kind!r} is not one of {', '.join(STORE_KINDS)}")
        owner = _validate_user(owner, "owner")
        on_full = _validate_on_full(on_full)
        secrets = _validate_secrets(secrets)
        pairs = _validate_metadata(metadata)
        max_memories = validate_cap(max_memories, "max_memories", limits.MAX_MEMORIES_PER_STORE)
        max_content_bytes = validate_cap(
            max_content_bytes, "max_content_bytes", limits.MAX_CONTENT_BYTES
        )
        now = utc_now()
        store = MemoryStore(
            id=StoreId(new_id(STORE_PREFIX)),
            name=name,
            description=description,
            metadata=pairs,
            created_at=now,
            updated_at=now,
            archived_at=None,
            memory_count=0,
            kind=kind,
            owner=owner,
            on_full=on_full,
            secrets=secrets,
            max_memories=max_memories,
            max_content_bytes=max_content_bytes,
        )

        def run(tx: Tx) -> MemoryStore:
            tx.run(
                "INSERT INTO memory_stores (id, name, description, metadata, created_at, "
                "updated_at, archived_at, memory_count, revision, kind, owner, on_full, secrets, "
                "max_memories, max_content_bytes) VALUES (:id, :name, :description, :metadata, "
                ":created_at, :updated_at, NULL, 0, 0, :kind, :owner, :on_full, :secrets, "
                ":max_memories, :max_content_bytes)",
                {
                    "id": store.id,
                    "name": name,
                    "description": description,
                    "metadata": json.dumps(pairs),
                    "created_at": now,
                    "updated_at": now,
                    "kind": kind,
                    "owner": owner,
                    "on_full": on_full,
                    "secrets": secrets,
                    "max_memories": max_memories,
                    "max_content_bytes": max_content_bytes,
                },
            )
            return store

        return self._write(run)

    def get_store(self, store_id: str) -> MemoryStore:
        return self._read(lambda tx: _store(self._store_row(tx, store_id)))

    def store_usage(self, store_id: str) -> dict[str, int | str | None]:
        """What a store holds, for an admin: live memories, the directories it keeps (of
        ``MAX_DIRECTORIES_PER_STORE``), its versions and their distinct texts, the bytes of
        those texts, and the time of its oldest version. History has no bound but prune's,
        so this is where a runaway writer shows. Counts every row: an admin's call."""
        octets = (
            "octet_length(content)"
            if self.db.dialect == "postgresql"
            else ("length(CAST(content AS BLOB))")
        )

        def run(tx: Tx) -> dict[str, int | str | None]:
            row = self._store_row(tx, store_id)
            params = {"store": store_id}
            versions = tx.one(
                "SELECT count(*) AS n, min(created_at) AS oldest FROM memory_versions "
                "WHERE store_id = :store",
                params,
            )
            texts = tx.one(
                f"SELECT count(*) AS n, coalesce(sum({octets}), 0) AS bytes FROM contents "
                "WHERE store_id = :store",
                params,
            )
            return {
                "memories": int(row.memory_count),
                "directories": directories_kept(tx, store_id),
                "versions": int(versions.n),
                "texts": int(texts.n),
                "text_bytes": int(texts.bytes),
                "oldest_version_at": versions.oldest,
            }

        return self._read(run, snapshot=True)

    def resolve_store(self, ref: str) -> StoreId:
        """A store id from a ``memstore_`` id or an exact store name."""

        def run(tx: Tx) -> StoreId:
            if ref.startswith(STORE_PREFIX):
                return StoreId(self._store_row(tx, ref).id)
            ids = [r.id for r in tx.all("SELECT id FROM memory_stores WHERE name = :n", {"n": ref})]
            if not ids:
                raise NotFound(f"no memory store is named {ref!r}")
            if len(ids) > 1:
                raise InvalidRequest(
                    f"{len(ids)} memory stores are named {ref!r} ({', '.join(sorted(ids))}): "
                    "use an id"
                )
            return StoreId(ids[0])

        return self._read(run)

    def list_stores(
        self,
        *,
        include_archived: bool = False,
        created_at_gte: str | datetime | None = None,
        created_at_lte: str | datetime | None = None,
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        cursor: str | None = None,
        only: Collection[str] | None = None,
    ) -> Page[MemoryStore]:
        """Stores in creation order (archived ones only when asked), created within the bounds
        given; ``only`` narrows the listing to those ids (what a session token may see)."""
        limit = _validate_limit(limit)
        gte = _validate_time(created_at_gte, "created_at[gte]")
        lte = _validate_time(created_at_lte, "created_at[lte]")
        query = json.dumps(["stores", include_archived, gte, lte, sorted(only or ())])
        after = _decode_cursor(query, cursor)
        where = ["id > :after"] if after is not None else []
        if not include_archived:
            where.append("archived_at IS NULL")
        if gte is not None:
            where.append("created_at >= :gte")
        if lte is not None:
            where.append("created_at <= :lte")
        ids, params = _placeholders("only", sorted(only or ()))
        if only is not None:
            where.append(f"id IN ({ids})" if ids else "1 = 0")
        sql = f"SELECT {_STORE_COLS} FROM memory_stores"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id LIMIT :limit"

        def run(tx: Tx) -> Page[MemoryStore]:
            rows = tx.all(
                sql, {**params, "after": after, "gte": gte, "lte": lte, "limit": limit + 1}
            )
            data = [_store(row) for row in rows[:limit]]
            more = len(rows) > limit
            return Page(
                data,
                _encode_cursor(query, data[-1].id) if more else None,
                lambda c: self.list_stores(
                    include_archived=include_archived,
                    created_at_gte=created_at_gte,
                    created_at_lte=created_at_lte,
                    limit=limit,
                    cursor=c,
                    only=only,
                ),
            )

        return self._read(run)

    def update_store(
        self,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        on_full: OnFull | None = None,
        secrets: SecretsPolicy | None = None,
        metadata: Mapping[str, str | None] | None = None,
        max_memories: int | None = None,
        max_content_bytes: int | None = None,
        evict: bool = False,
    ) -> MemoryStore:
        """Change what is given; ``metadata`` merges into the store's (a ``None`` value deletes
        that key). Giving nothing returns the store unchanged. A cap (``max_memories``,
        ``max_content_bytes``; 0 removes one) under what the store holds is refused, unless it
        evicts and ``evict`` is given (see ``pools.py``)."""
        caps = {"max_memories": max_memories, "max_content_bytes": max_content_bytes}
        for key, most in (
            ("max_memories", limits.MAX_MEMORIES_PER_STORE),
            ("max_content_bytes", limits.MAX_CONTENT_BYTES),
        ):
            if caps[key] != 0:
                validate_cap(caps[key], key, most)
        if on_full is not None:
            on_full = _validate_on_full(on_full)
        if secrets is not None:
            secrets = _validate_secrets(secrets)
        if name is not None:
            name = _validate_store_name(name)
        if description is not None:
            description = _validate_description(description)

        def run(tx: Tx) -> MemoryStore:
            row = self._lock_store(tx, store_id)
            if all(v is None for v in (name, description, on_full, secrets, metadata)) and all(
                v is None for v in caps.values()
            ):
                return _store(row)
            new_caps = {
                key: (row._asdict()[key] if value is None else (value or None))
                for key, value in caps.items()
            }
            self._cap_store(tx, row, new_caps["max_memories"], new_caps["max_content_bytes"], evict)
            pairs = json.loads(row.metadata)
            if metadata is not None:
                pairs = _validate_metadata(metadata, pairs)
            tx.run(
                "UPDATE memory_stores SET name = :name, description = :description, "
                "metadata = :metadata, on_full = :on_full, secrets = :secrets, updated_at = :now, "
                "max_memories = :max_memories, max_content_bytes = :max_content_bytes, "
                "revision = revision + 1 WHERE id = :id",
                {
                    "name": row.name if name is None else name,
                    "description": row.description if description is None else description,
                    "metadata": json.dumps(pairs),
                    "on_full": row.on_full if on_full is None else on_full,
                    "secrets": row.secrets if secrets is None else secrets,
                    "now": utc_now(),
                    "id": store_id,
                    **new_caps,
                },
            )
            tx.tell(store_id)  # mounts look again
            return _store(self._store_row(tx, store_id))

        return self._write(run)

    def archive_store(self, store_id: str) -> MemoryStore:
        """Make a store read-only forever. Archiving an archived store changes nothing."""

        def run(tx: Tx) -> MemoryStore:
            row = self._store_row(tx, store_id, lock=True)
            if row.archived_at is None:
                tx.run(
                    "UPDATE memory_stores SET archived_at = :now, revision = revision + 1 "
                    "WHERE id = :id",
                    {"now": utc_now(), "id": store_id},
                )
                tx.tell(store_id)  # read-only now: mounts look again
            return _store(self._store_row(tx, store_id))

        return self._write(run)

    def delete_store(self, store_id: str) -> None:
        """Remove a store with its memories, versions and directories.

        Refused while a session that has not ended has it attached: that session's mount would
        lose a directory it was promised.
        """

        def run(tx: Tx) -> None:
            self._store_row(tx, store_id, lock=True)
            active = [
                r.id
                for r in tx.all(
                    "SELECT s.id FROM sessions s JOIN session_attachments a "
                    "ON a.session_id = s.id WHERE a.store_id = :id AND s.ended_at IS NULL "
                    "ORDER BY s.id",
                    {"id": store_id},
                )
            ]
            if active:
                raise Conflict(
                    f"memory store {store_id!r} is attached to active session(s) "
                    f"{', '.join(active)}: end them first"
                )
            for table in ("session_attachments", "memory_versions", "memories", "directories"):
                tx.run(f"DELETE FROM {table} WHERE store_id = :id", {"id": store_id})
            _sweep_contents(tx, store_id)  # all of them now: nothing names any
            tx.run("DELETE FROM memory_stores WHERE id = :id", {"id": store_id})
            forget_marks(tx, store_id)
            _purge_search_index(tx)

        self._write(run)
        self._clear_wal()

    def _cap_store(
        self,
        tx: Tx,
        row: Any,
        max_memories: int | None,
        max_content_bytes: int | None,
        evict: bool,
    ) -> None:
        """Check new caps of the locked store ``row`` against what it holds (see the module
        docstring); evicts the excess when asked and allowed."""
        if max_memories is not None and row.memory_count > max_memories:
            excess = row.memory_count - max_memories
            if row.on_full != "evict-lru" or not evict:
                how = (
                    "pass evict=True (--evict) to evict them now, least recently accessed first"
                    if row.on_full == "evict-lru"
                    else "delete memories first"
                )
                raise Conflict(
                    f"store {row.name!r} holds {row.memory_count} memories: a cap of "
                    f"{max_memories} would evict {excess}; {how}"
                )
            for _ in range(excess):
                eviction.evict_lru(self, tx, row.id)
        if max_content_bytes is not None:
            big = tx.one(
                "SELECT path, size_bytes FROM memories WHERE store_id = :id "
                "AND size_bytes > :cap ORDER BY size_bytes DESC LIMIT 1",
                {"id": row.id, "cap": max_content_bytes},
            )
            if big is not None:
                raise Conflict(
                    f"store {row.name!r} holds {big.path!r} of {big.size_bytes} bytes: a cap of "
                    f"{max_content_bytes} bytes per memory is under it (shorten or delete it "
                    "first)"
                )
