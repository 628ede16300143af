"""The transaction primitives every writer uses, and what a service holds.

Lock and count a store (``_change_store``), write a version, insert a memory, apply an
update, check a path is free, note and flush reads, evict: one place for each, so every face
(mount, CLI, sync, API) writes versions the same way. See ``service.py`` for the concurrency
contract.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn, TypeVar

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import (
    NotFound,
    StoreArchived,
    StoreFull,
)
from mnemofs.models import (
    MEMORY_PREFIX,
    VERSION_PREFIX,
    Attachment,
    Memory,
    MemoryId,
    Session,
    SessionId,
    StoreId,
    VersionId,
    new_id,
)
from mnemofs.store import eviction
from mnemofs.store.directories import keep_directory
from mnemofs.store.engine import Engine
from mnemofs.store.rows import (
    _MEMORY_COLS,
    _MOVED,
    _NEW_MEMORY,
    _STORE_COLS,
    _VERSION_COLS,
    ACCESS_FLUSH_S,
    BY_ID_IN_STORE,
    StoreLock,
    _access,
    _Assumed,
    _memory,
    _path_query,
    _path_verdict,
    _timestamp,
    utc_now,
)
from mnemofs.store.searchmarks import MOVED_VECTOR
from mnemofs.store.sql import Database
from mnemofs.store.texts import _CONTENT_INSERT, _MEMORY_CONTENT, _VERSION_CONTENT
from mnemofs.store.trail import SearchTrail
from mnemofs.store.tx import Tx

T = TypeVar("T")
# A version row (``ServiceBase._version_params``), its text already kept or sent beside it.
_VERSION_INSERT = (
    "INSERT INTO memory_versions (id, store_id, memory_id, operation, path, content_sha256, "
    "size_bytes, created_at, actor, redacted_at, folded_id) VALUES (:version, :store, :memory, "
    ":op, :path, :sha, :size, :now, :actor, NULL, :folded)"
)
SAVED_KEPT_BYTES = 8 << 20  # the content of its last saves a service keeps (PostgreSQL), at most
# What memory_versions.operation holds: the wire's words, and 'renamed' for a path change.
StoredOperation = Literal["created", "modified", "renamed", "deleted"]
log = logging.getLogger("mnemofs.store")


class ServiceBase:
    """What every part of the service shares: the database, the actor, noted reads, and the
    transaction primitives below."""

    def __init__(self, engine: Engine, *, actor: str = "api") -> None:
        self.engine = engine
        self.actor = actor
        self.db = Database(engine)
        self._accessed: dict[tuple[str, str], float] = {}  # (store, memory) -> last read
        self._seen: dict[str, StoreLock] = {}  # each store's rules as last locked (PostgreSQL)
        self._saved: dict[str, _Assumed] = {}  # memory -> the row as this service saved it
        self._saved_bytes = 0  # the content in _saved (see _remember)
        self._saved_lock = threading.Lock()  # the HTTP server saves from several threads
        self._accessed_since = 0.0
        self._access_lock = threading.Lock()
        # Evictions made here (eviction.py), in a create's transaction: its caller's tree
        # shows the create, not the eviction, so such a write is never taken as the caller's
        # own (``own_since``, ``take_moved``).
        self.evictions = 0
        self._evictions_seen = 0  # by ``own_since``
        self._moved = threading.local()  # ``want_moved``, ``take_moved``: per thread
        self.search_trail = SearchTrail(self.db)

    def close(self) -> None:
        self.search_trail.stop()
        with suppress(Exception):  # a database that is gone loses the last second of reads
            self.flush_accesses()
        with suppress(Exception):  # the next search, in any process, catches up instead
            self.catch_up_search()
        self.db.close()

    def catch_up_search(self, *, upkeep: bool = False) -> None:
        """Take every change noted for the search index into it now (``SearchTrail``)."""
        self.search_trail.catch_up(upkeep=upkeep)

    def _read(self, fn: Callable[[Tx], T], *, snapshot: bool = False) -> T:
        if self._accessed and time.monotonic() - self._accessed_since > ACCESS_FLUSH_S:
            with suppress(Exception):
                self.flush_accesses()
        return self.db.run(fn, write=False, snapshot=snapshot)  # snapshot: all at one moment

    def _write(self, fn: Callable[[Tx], T]) -> T:
        def with_accesses(tx: Tx) -> T:
            self._flush_accesses(tx)
            return fn(tx)

        call = with_accesses if self._accessed else fn
        local = self._moved
        if not getattr(local, "wanted", False):
            result = self.db.run(call, write=True)
        else:
            local.made = local.pending = None
            result = self.db.run(self._reporting(call), write=True)
            if local.pending is not None:  # committed: its answer is in
                store_id, answer = local.pending
                row = answer()[0]
                local.made = (store_id, int(row.revision), int(row.last or 0))
        self.search_trail.wrote()
        return result

    def _reporting(self, fn: Callable[[Tx], T]) -> Callable[[Tx], T]:
        """``fn``, then (in its transaction, its store still locked by it, so nobody else can
        have moved it since) the revision and the end of the change feed it left its store
        at, if it moved one store and evicted nothing (``take_moved``). On PostgreSQL the
        query goes out with the COMMIT: no round trip of its own."""

        def run(tx: Tx) -> T:
            self._moved.pending = None  # a try made again starts over
            evictions = self.evictions
            result = fn(tx)
            if len(tx.told) == 1 and self.evictions == evictions:
                store_id = next(iter(tx.told))
                self._moved.pending = (store_id, tx.ahead(_MOVED, {"id": store_id}))
            return result

        return run

    def want_moved(self) -> None:
        """Have this thread's writes, until ``take_moved``, note what they leave their store
        at (a server, for a remote mount's change: moves.py)."""
        self._moved.wanted, self._moved.made = True, None

    def take_moved(self) -> tuple[str, int, int] | None:
        """(store, revision, feed end) as this thread's last write since ``want_moved`` left
        them, if it moved that one store alone and evicted nothing (``_reporting``), else
        None; and no more noting."""
        local = self._moved
        made = getattr(local, "made", None)
        local.wanted, local.made = False, None
        return made

    def _store_row(self, tx: Tx, store_id: str, *, lock: bool = False) -> Any:
        sql = f"SELECT {_STORE_COLS} FROM memory_stores WHERE id = :id"
        row = tx.one(sql + " FOR UPDATE" if lock else sql, {"id": store_id})
        if row is None:
            raise NotFound(f"memory store {store_id!r} not found")
        return row

    def _lock_store(self, tx: Tx, store_id: str) -> Any:
        """Lock a live store's row for a change; refuse an archived store."""
        row = self._store_row(tx, store_id, lock=True)
        if row.archived_at is not None:
            raise StoreArchived(
                f"memory store {row.name!r} ({store_id}) is archived and read-only "
                f"since {row.archived_at}"
            )
        return row

    def _change_store(
        self,
        tx: Tx,
        store_id: str,
        count_delta: int = 0,
        *,
        room_for: str | None = None,
        archived_ok: bool = False,
        may_create: bool = False,
    ) -> StoreLock:
        """See ``_lock_and_count``, which this is without a query sent behind it."""
        return self._lock_and_count(
            tx,
            store_id,
            count_delta,
            room_for=room_for,
            archived_ok=archived_ok,
            may_create=may_create,
        )()

    def _lock_and_count(
        self,
        tx: Tx,
        store_id: str,
        count_delta: int = 0,
        *,
        room_for: str | None = None,
        archived_ok: bool = False,
        may_create: bool = False,
    ) -> Callable[[], StoreLock]:
        """The first statement of every change to a store's memories or directories: lock the
        store's row, refuse an archived store (unless ``archived_ok``: a delete through the
        API) and, with ``room_for``, a full one (its own cap, then its capacity pool's); count
        the change. One UPDATE, sent now; the function returned reads its answer (a query
        sent in between shares its round trip, ``Tx.ahead``) and gives what ``_screen`` needs.
        On PostgreSQL a change that may create (``room_for``; ``may_create``: a create may
        follow) in a store last seen in a capacity pool locks the pool first: evicting locks
        the victim's store too, and creates each holding their own store deadlocked."""
        seen = self._seen.get(store_id)
        pooled = seen is None or seen.pool_id is not None  # not seen yet: as if pooled
        if tx.dialect == "postgresql" and pooled and (may_create or (room_for and count_delta > 0)):
            tx.run(
                "SELECT 1 FROM capacity_pools WHERE id = "
                "(SELECT pool_id FROM memory_stores WHERE id = :id) FOR UPDATE",
                {"id": store_id},
            )
        sql = (
            "UPDATE memory_stores SET memory_count = memory_count + :delta, "
            "revision = revision + 1 WHERE id = :id"
        )
        if not archived_ok:
            sql += " AND archived_at IS NULL"
        if room_for is not None:
            sql += " AND memory_count < COALESCE(max_memories, :max)"
        returned = "secrets, memory_count, max_content_bytes, pool_id, max_memories"
        sql += f" RETURNING {returned}"
        tx.tell(store_id)  # once committed (PostgreSQL)
        params = {"delta": count_delta, "id": store_id, "max": limits.MAX_MEMORIES_PER_STORE}
        sent = tx.ahead(sql, params)
        return lambda: self._counted(tx, store_id, count_delta, room_for, sent())

    def _lock_only(
        self, tx: Tx, store_id: str, count_delta: int = 0, *, archived_ok: bool = False
    ) -> Callable[[], StoreLock | None]:
        """``_lock_and_count`` for a change that needs none of the store's rules (a delete, a
        rename, a directory made, moved or removed, a restore, an eviction's victim). On
        SQLite the UPDATE returns no row: a row count says it matched, ~10 µs less on a delete
        (decisions.md, issue 17). Call the result, as ``_lock_and_count``'s, before relying
        on the lock: on PostgreSQL that is where a missing or archived store is refused."""
        if tx.dialect == "postgresql":  # its answer waits for the next round trip
            return self._lock_and_count(tx, store_id, count_delta, archived_ok=archived_ok)
        sql = (
            "UPDATE memory_stores SET memory_count = memory_count + :delta, "
            "revision = revision + 1 WHERE id = :id"
        )
        if not archived_ok:
            sql += " AND archived_at IS NULL"
        if not tx.count(sql, {"delta": count_delta, "id": store_id}):
            self._lock_store(tx, store_id)  # NotFound or StoreArchived
        tx.tell(store_id)
        return lambda: None

    def _counted(
        self, tx: Tx, store_id: str, count_delta: int, room_for: str | None, answer: list[Any]
    ) -> StoreLock:
        """The rest of ``_lock_and_count``, once its UPDATE has answered."""
        changed = answer[0] if answer else None
        if changed is not None:
            lock = StoreLock(
                str(changed.secrets),
                int(changed.memory_count),
                changed.max_content_bytes,
                changed.pool_id,
                changed.max_memories,
            )
            self._seen[store_id] = lock
            if room_for is not None and lock.pool_id is not None and count_delta > 0:
                eviction.pool_room(self, tx, lock.pool_id, room_for)
            return lock
        row = self._lock_store(tx, store_id)  # NotFound or StoreArchived
        if (
            room_for is not None
            and row.on_full == "evict-lru"
            and eviction.evict_lru(self, tx, store_id)
        ):
            return self._change_store(tx, store_id, count_delta, room_for=room_for)
        cap = row.max_memories if row.max_memories is not None else limits.MAX_MEMORIES_PER_STORE
        own = "its own cap" if row.max_memories is not None else "the limit"
        raise StoreFull(
            f"memory store {row.name!r} ({store_id}) already holds {row.memory_count} "
            f"memories, {own} of {cap}; cannot create {room_for!r}"
        )

    def note_access(self, store_id: str, memory_id: str) -> None:
        """Count a read of a memory (the mount calls this at open). Costs a dict write; the
        time reaches the database with this process's next write, or within
        ``ACCESS_FLUSH_S`` of a read, or at ``close``."""
        accessed = self._accessed  # no lock: a read racing a flush may go uncounted (advisory)
        if not accessed:
            self._accessed_since = time.monotonic()
        accessed[(store_id, memory_id)] = time.time()

    def _accesses_in(self) -> float | None:
        """Seconds until the reads noted are due to be written (``ACCESS_FLUSH_S`` after the
        first of them); None while there are none."""
        if not self._accessed:
            return None
        return self._accessed_since + ACCESS_FLUSH_S - time.monotonic()

    def flush_accesses(self) -> None:
        """Write noted accesses now (a mount's upkeep does once due: ``FeedMixin.checkpoint``)."""
        if self._accessed:
            self.db.run(self._flush_accesses, write=True)

    def _flush_accesses(self, tx: Tx) -> None:
        with self._access_lock:
            pending, self._accessed = self._accessed, {}
        for (store_id, memory_id), at in pending.items():
            stamp = _timestamp(datetime.fromtimestamp(at, UTC))
            # The store too: a read noted for one store never touches another's memories
            # (a session token may name any id in its reads, see http/mounts.py).
            tx.run(
                f"UPDATE memories SET accessed_at = :at WHERE {BY_ID_IN_STORE} "
                "AND (accessed_at IS NULL OR accessed_at < :at)",
                {"at": stamp, "id": memory_id, "store": store_id},
            )

    def _memory_row(self, tx: Tx, store_id: str, memory_id: str, *, content: bool = False) -> Any:
        return self._memory_ahead(tx, store_id, memory_id, content=content)()

    def _memory_ahead(
        self, tx: Tx, store_id: str, memory_id: str, *, content: bool = False
    ) -> Callable[[], Any]:
        """Send for a memory's row (``Tx.ahead``); the function returned reads it, or NotFound."""
        cols = _MEMORY_COLS + (f", {_MEMORY_CONTENT}" if content else "")
        sent = tx.ahead(
            f"SELECT {cols} FROM memories WHERE {BY_ID_IN_STORE}",
            {"id": memory_id, "store": store_id},
        )

        def row() -> Any:
            if found := sent():
                return found[0]
            self._no_memory(tx, store_id, memory_id)

        return row

    def _no_memory(self, tx: Tx, store_id: str, memory_id: str) -> NoReturn:
        """NotFound for a memory a query did not find: the store's, if it is the store that is
        missing (a memory named with another store is not found in this one)."""
        self._store_row(tx, store_id)
        raise NotFound(f"memory {memory_id!r} not found in store {store_id!r}")

    def _path_check(
        self,
        tx: Tx,
        store_id: str,
        path: str,
        *,
        ignore: str | None = None,
        existing_ok: bool = False,
    ) -> Callable[[], str | None]:
        """Refuse a path taken by a memory or a directory, or under a memory; with
        ``existing_ok``, a memory at the path itself is no refusal: its id is returned. The
        query is sent now (``Tx.ahead``); the function returned reads it and decides.

        A path is never both a file and a directory, so every store can be mounted. One query:
        memories at the path or at an ancestor (as a file), the first memory under it, and the
        first explicit directory at or under it.
        """
        sent = tx.ahead(*_path_query(store_id, path, ignore))
        return lambda: _path_verdict(sent(), path, path + "/", ignore, existing_ok)

    def _version_params(
        self,
        store_id: str,
        memory_id: str,
        operation: StoredOperation,
        path: str,
        sha: str | None,
        size: int,
        now: str,
        actor: str | None,
    ) -> dict[str, Any]:
        """``_VERSION_INSERT``'s parameters, with a new version id (``sha``: None for no text;
        ``folded`` None)."""
        return {
            "version": new_id(VERSION_PREFIX),
            "store": store_id,
            "memory": memory_id,
            "op": operation,
            "path": path,
            "sha": sha,
            "size": size,
            "now": now,
            "actor": actor or self.actor,
            "folded": None,
        }

    def _remove_memory(
        self, tx: Tx, store_id: str, row: Any, actor: str | None, now: str, *, keep_directory: bool
    ) -> VersionId:
        """Remove a memory's row and close it with a 'deleted' version (the store is locked and
        already counted); ``keep_directory`` keeps a directory the removal empties."""
        tx.run("DELETE FROM memories WHERE id = :id", {"id": row.id})
        return self._close_memory(tx, store_id, row, actor, now, keep_directory=keep_directory)

    def _close_memory(
        self, tx: Tx, store_id: str, row: Any, actor: str | None, now: str, *, keep_directory: bool
    ) -> VersionId:
        """The 'deleted' version of a memory whose row is gone (``row``: its id and path)."""
        params = self._version_params(store_id, row.id, "deleted", row.path, None, 0, now, actor)
        tx.run(_VERSION_INSERT, params)
        version_id = VersionId(params["version"])
        if keep_directory:
            self._keep_directory(tx, store_id, row.path, now)
        return version_id

    def _insert_memory(
        self,
        tx: Tx,
        store_id: str,
        path: str,
        new: Content,
        actor: str | None,
        *,
        memory_id: str | None = None,
    ) -> Memory:
        """The rows of a new memory and its 'created' version (store counted, path checked);
        ``memory_id``: a deleted memory made again under its own id (a restore)."""
        params, memory = self._new_memory(store_id, path, new, actor, memory_id)
        insert = f"INSERT INTO {_NEW_MEMORY[0]} VALUES ({_NEW_MEMORY[1]})"
        tx.run_together([_CONTENT_INSERT, _VERSION_INSERT, insert], params)
        return memory

    def _new_memory(
        self, store_id: str, path: str, new: Content, actor: str | None, memory_id: str | None
    ) -> tuple[dict[str, Any], Memory]:
        """A new memory as created now: the parameters of its rows (``_NEW_MEMORY``, its
        'created' version, its content) and the memory."""
        content, sha, size, now = new.text, new.sha256, new.size, utc_now()
        memory_id = MemoryId(memory_id or new_id(MEMORY_PREFIX))
        params = self._version_params(store_id, memory_id, "created", path, sha, size, now, actor)
        memory = Memory(
            id=memory_id,
            memory_store_id=StoreId(store_id),
            path=path,
            content_sha256=sha,
            content_size_bytes=size,
            memory_version_id=VersionId(params["version"]),
            created_at=now,
            updated_at=now,
            content=content,
        )
        return params | {"content": content}, memory

    def _apply_update(
        self,
        tx: Tx,
        store_id: str,
        row: Any,
        new_path: str,
        new: Content | None,
        actor: str | None,
        *,
        keep_directory: bool = False,
        folded_id: str | None = None,
    ) -> Memory:
        """Write a memory's new path and/or content (``None``: the same) and its one version;
        none if nothing changes. Content is compared by hash, and kept once per hash: a rename
        writes none. ``row`` needs its ``content`` column only when ``new`` is None (the memory
        returned carries it)."""
        if new is None:
            new = Content.stored(row.content, row.content_sha256, row.size_bytes)
        if new_path == row.path and new.sha256 == row.content_sha256:
            return _memory(row, new.text)
        operation: StoredOperation = "renamed" if new_path != row.path else "modified"
        now = utc_now()
        new_content, sha, size = new.text, new.sha256, new.size
        params = self._version_params(store_id, row.id, operation, new_path, sha, size, now, actor)
        version_id = VersionId(params["version"])
        if sha == row.content_sha256:  # a rename: the content stays where it is
            writes = []
            set_content = ""
        else:
            writes = [_CONTENT_INSERT]
            set_content = "content_sha256 = :sha, size_bytes = :size, "
        if new_path != row.path:
            set_content += MOVED_VECTOR[tx.dialect]
        writes += [
            _VERSION_INSERT,
            f"UPDATE memories SET path = :path, {set_content}updated_at = :now, "
            "head_version_id = :version, accessed_at = :now WHERE id = :memory",
        ]
        tx.run_together(writes, params | {"content": new_content, "folded": folded_id})
        if keep_directory and new_path != row.path:
            self._keep_directory(tx, store_id, row.path, now)
        return Memory(
            id=MemoryId(row.id),
            memory_store_id=StoreId(store_id),
            path=new_path,
            content_sha256=sha,
            content_size_bytes=size,
            memory_version_id=version_id,
            created_at=row.created_at,
            updated_at=now,
            content=new_content,
        )

    _keep_directory = staticmethod(keep_directory)

    def _forget(self, memory_id: str) -> None:
        with self._saved_lock:
            forgotten = self._saved.pop(memory_id, None)
            self._saved_bytes -= len(forgotten.content) if forgotten else 0

    def _remember(self, memory: Memory) -> None:
        """Keep a memory's row as this service saved it, for the next change over it
        (``_save_over_last``); the least recently saved are forgotten once they hold too much
        content (the dict keeps the order of saves: a save moves its memory to the end)."""
        if memory.content is None:
            return
        with self._saved_lock:  # the byte count stays exact with threads
            before = self._saved.pop(memory.id, None)
            if before is not None:
                self._saved_bytes -= len(before.content)
            size = len(memory.content)
            if size > SAVED_KEPT_BYTES:
                return
            while self._saved_bytes + size > SAVED_KEPT_BYTES:
                oldest = self._saved.pop(next(iter(self._saved)))
                self._saved_bytes -= len(oldest.content)
            self._saved[memory.id] = _Assumed.of(memory)
            self._saved_bytes += size

    def _version_row(self, tx: Tx, store_id: str, version_id: str) -> Any:
        row = tx.one(
            f"SELECT {_VERSION_COLS}, {_VERSION_CONTENT} FROM memory_versions "
            f"WHERE {BY_ID_IN_STORE}",
            {"id": version_id, "store": store_id},
        )
        if row is None:
            self._store_row(tx, store_id)
            raise NotFound(f"memory version {version_id!r} not found in store {store_id!r}")
        return row

    def _clear_wal(self) -> None:
        """After an erasing change: empty the SQLite WAL, whose older frames still hold what was
        erased (see docs/decisions.md, "Erasure")."""
        if not self.db.clear_wal():
            log.warning(
                "readers kept the WAL busy: erased text may stay in %s-wal until the "
                "next checkpoint",
                self.db.engine.sqlite_path,
            )

    @staticmethod
    def _session(tx: Tx, session_id: str) -> Session:
        row = tx.one(
            "SELECT id, created_at, ended_at, mount_root, user_id, fields FROM sessions "
            "WHERE id = :id",
            {"id": session_id},
        )
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        attached = tx.all(
            "SELECT a.store_id, a.access, a.instructions, a.slug, a.name, a.description, s.kind, "
            "s.on_full "
            "FROM session_attachments a JOIN memory_stores s ON s.id = a.store_id "
            "WHERE a.session_id = :id ORDER BY a.position",
            {"id": session_id},
        )
        root = row.mount_root.rstrip("/")
        resources = tuple(
            Attachment(
                memory_store_id=StoreId(a.store_id),
                access=_access(a.access),
                instructions=a.instructions,
                name=a.name,
                description=a.description,
                mount_path=f"{root}/{a.slug}",
                kind=a.kind,
                on_full=a.on_full,
            )
            for a in attached
        )
        return Session(
            id=SessionId(row.id),
            created_at=row.created_at,
            ended_at=row.ended_at,
            mount_root=row.mount_root,
            resources=resources,
            user_id=row.user_id,
            fields=json.loads(row.fields),
        )
