"""Saves as a filesystem makes them (the mount and sync mode): whole-file saves, renames
over a target (with folds), directory moves.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import (
    Conflict,
    ContentTooLarge,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    SecretDetected,
)
from mnemofs.models import (
    Memory,
    MemoryId,
    StoreId,
    VersionId,
)
from mnemofs.paths import (
    ancestor_prefixes,
    as_prefix,
    prefix_upper_bound,
    validate_path,
)
from mnemofs.store.base import _VERSION_INSERT, ServiceBase
from mnemofs.store.rows import (
    _AS_SAVED,
    _MEMORY_COLS,
    _NEW_MEMORY,
    _STORE_AS_SEEN,
    _STORE_WITH_ROOM,
    BY_ID_IN_STORE,
    StoreLock,
    _as_saved,
    _locked,
    _memories_at,
    _path_free,
    _screen,
    utc_now,
)
from mnemofs.store.texts import _CONTENT_INSERT, _MEMORY_CONTENT
from mnemofs.store.tx import GuardFailed, Tx

FOLD_MAX_VERSIONS = 3  # a source with more versions is a file of its own, not a temporary

# PostgreSQL: a save over this service's last save of a memory (``_save_over_last``) as one
# statement: the store locked and counted while its rules are the ones seen (as
# ``_STORE_AS_SEEN``), the memory's row changed while it is as that save left it
# (``_AS_SAVED``), its text kept and its version written. What the writes of
# ``_apply_update`` are, less the server's per-statement work: five statements took ~280 µs a
# save in one process, this one ~220. No row changed is a division by zero: ``GuardFailed``,
# and the statement, so the transaction, leaves nothing behind.
_SAVE_OVER_LAST = (
    f"WITH s AS ({_STORE_AS_SEEN} RETURNING id), "
    "m AS (UPDATE memories SET content_sha256 = :sha, size_bytes = :size, updated_at = :now, "
    f"head_version_id = :version, accessed_at = :now WHERE {_AS_SAVED} "
    "AND EXISTS (SELECT 1 FROM s) RETURNING id), "
    f"c AS ({_CONTENT_INSERT}), v AS ({_VERSION_INSERT}) SELECT 1 / count(*)::int FROM m"
)

# PostgreSQL: a create in a store as seen (``_create_as_seen``), after the store's lock
# (``_STORE_WITH_ROOM``, a statement of its own, so that this one's snapshot holds what the lock
# waited for): the new memory's rows, only if nothing is in the way at the path (``_path_free``,
# as ``{free}``). No row made is a division by zero: ``GuardFailed``, and nothing written.
_CREATE_AS_SEEN = (
    "WITH ok AS (SELECT 1 WHERE {free}), "
    f"m AS (INSERT INTO {_NEW_MEMORY[0]} SELECT {_NEW_MEMORY[1]} FROM ok RETURNING id), "
    f"c AS ({_CONTENT_INSERT}), v AS ({_VERSION_INSERT}) SELECT 1 / count(*)::int FROM m"
)


class SavesMixin(ServiceBase):
    """Saves as a filesystem makes them (the mount and sync mode): whole-file saves, renames"""

    def save_file(
        self,
        store_id: str,
        path: str,
        content: str | Content,
        *,
        memory_id: str | None = None,
        actor: str | None = None,
    ) -> tuple[Memory, bool]:
        """Save a file's whole content as one version, in one transaction; also say whether a
        memory was created. The version goes to ``memory_id`` while it exists (wherever it
        moved), else to the memory another writer put at ``path`` meanwhile (on a shared
        filesystem both opened the same file: last commit wins), else a new memory at
        ``path``. A directory at ``path`` is a Conflict."""
        path = validate_path(path)
        new = Content.from_text(content)
        # A save stamps accessed_at itself: a read noted since needs no UPDATE of its own
        # (one statement less per save of an opened file), unless nothing is written.
        noted = None if memory_id is None else self._accessed.pop((store_id, memory_id), None)
        unchanged = False

        def run(tx: Tx) -> tuple[Memory, bool]:
            nonlocal unchanged
            # PostgreSQL: lock the store before anything is read, the lookup sent behind the
            # lock (it runs after it, in the same round trip). SQLite's BEGIN IMMEDIATE holds
            # the database's write lock already, so the store is counted once, after the
            # lookup (a create's one UPDATE instead of two). Whether anything changed is a
            # comparison of hashes: the stored content is read for the secrets screen only.
            cols = f"{_MEMORY_COLS}, {_MEMORY_CONTENT}"
            by_id = f"SELECT {cols} FROM memories WHERE {BY_ID_IN_STORE}"
            ids = {"id": memory_id, "store": store_id}
            locked: StoreLock | None = None
            row = there = None
            if tx.dialect == "sqlite":
                row = tx.one(by_id, ids) if memory_id is not None else None
            elif memory_id is not None:
                lock, found = (
                    self._lock_and_count(tx, store_id, may_create=True),
                    tx.ahead(by_id, ids),
                )
                locked = lock()
                row = next(iter(found()), None)
            else:
                lock = self._lock_and_count(tx, store_id, may_create=True)
                check = self._path_check(tx, store_id, path, existing_ok=True)
                locked, there = lock(), check()
            if row is None and (memory_id is not None or tx.dialect == "sqlite"):
                # a new file, or one another writer made at the path meanwhile
                there = self._path_check(tx, store_id, path, existing_ok=True)()
            if row is None and there is not None:
                row = tx.one(f"SELECT {cols} FROM memories WHERE id = :id", {"id": there})
            policy: StoreLock | None = locked
            if row is not None:
                if policy is None:
                    policy = self._change_store(tx, store_id)
                if new.sha256 != row.content_sha256:
                    _screen(policy, store_id, row.path, new.text, getattr(row, "content", None))
                unchanged = new.sha256 == row.content_sha256
                return self._apply_update(tx, store_id, row, row.path, new, actor), False
            if locked is not None and locked.has_room():
                # Locked with room: the count goes out with the inserts (one round trip).
                tx.run(
                    "UPDATE memory_stores SET memory_count = memory_count + 1 WHERE id = :id",
                    {"id": store_id},
                )
            else:
                policy = self._change_store(tx, store_id, +1, room_for=path)
            assert policy is not None
            _screen(policy, store_id, path, new.text)
            return self._insert_memory(tx, store_id, path, new, actor), True

        saved = None
        try:
            if self.db.dialect == "postgresql":
                with suppress(GuardFailed):
                    if memory_id is None:
                        saved = self._create_as_seen(store_id, path, new, actor)
                    else:
                        saved = self._save_over_last(store_id, memory_id, new, actor)
            if saved is None:
                saved = self._write(run)
            if self.db.dialect == "postgresql":
                self._remember(saved[0])
            return saved
        finally:
            if noted is not None and memory_id is not None and (saved is None or unchanged):
                self.note_access(store_id, memory_id)  # not written after all: noted again

    def _create_as_seen(
        self, store_id: str, path: str, new: Content, actor: str | None
    ) -> tuple[Memory, bool]:
        """PostgreSQL: a create in a store this service has seen, in one round trip, as
        ``_save_over_last`` saves: the store must still have the rules seen, room by its own cap
        and no capacity pool, and the path check's query must answer no row (nothing at the
        path, above it as a file or under it). ``GuardFailed`` as there: the careful save then
        also finds a memory another writer made at the path meanwhile, and saves to it."""
        seen = self._seen.get(store_id)
        if seen is None or seen.pool_id is not None:
            raise GuardFailed("nothing to assume")
        try:
            _screen(seen, store_id, path, new.text)
        except (SecretDetected, ContentTooLarge):
            raise GuardFailed("refused by the store as last seen") from None
        free, where = _path_free(store_id, path, None)
        rules = {"secrets": seen.secrets, "cap": seen.max_content_bytes}
        rules["max"] = limits.MAX_MEMORIES_PER_STORE

        def run(tx: Tx) -> Memory:
            tx.guard(_locked(_STORE_WITH_ROOM), where | rules)
            tx.tell(store_id)
            params, memory = self._new_memory(store_id, path, new, actor, None)
            tx.guard(_CREATE_AS_SEEN.format(free=free), params | where)
            return memory

        return self._write(run), True

    def _save_over_last(
        self, store_id: str, memory_id: str, new: Content, actor: str | None
    ) -> tuple[Memory, bool]:
        """PostgreSQL: a save of a memory this service saved last, in one round trip instead
        of two. It assumes the store's rules and the memory are still as they were then, and
        sends what would have checked that (``Tx.guard``) with the writes and the ``COMMIT``.
        ``GuardFailed`` when there is nothing to assume or an assumption no longer holds (the
        database is as before); the caller then saves the careful way, which finds out what
        changed. The content is screened as the store was last seen, against the content of
        that save; a refusal is left to the careful save to make."""
        seen, last = self._seen.get(store_id), self._saved.get(memory_id)
        if seen is None or last is None or last.content_sha256 == new.sha256:
            raise GuardFailed("nothing to assume")
        try:
            _screen(seen, store_id, last.path, new.text, last.content)
        except (SecretDetected, ContentTooLarge):
            raise GuardFailed("refused by the store as last seen") from None

        def run(tx: Tx) -> Memory:
            now = utc_now()
            params = self._version_params(
                store_id, memory_id, "modified", last.path, new.sha256, new.size, now, actor
            )
            version = VersionId(params["version"])
            rules = {"secrets": seen.secrets, "cap": seen.max_content_bytes}
            _, was = _as_saved(last)
            tx.guard(_SAVE_OVER_LAST, params | rules | was | {"content": new.text})
            tx.tell(store_id)
            return Memory(
                id=MemoryId(memory_id),
                memory_store_id=StoreId(store_id),
                path=last.path,
                content_sha256=new.sha256,
                content_size_bytes=new.size,
                memory_version_id=version,
                created_at=last.created_at,
                updated_at=now,
                content=new.text,
            )

        try:
            return self._write(run), False
        except GuardFailed:
            self._forget(memory_id)
            raise

    def rename_over(
        self,
        store_id: str,
        source_id: str,
        target_id: str,
        *,
        actor: str | None = None,
        fold: bool = False,
    ) -> Memory:
        """``rename(source, target)`` onto an existing file, as editors and ``os.replace`` save.

        The target keeps its id and path and takes the source's content (one ``modified``
        version, none if equal); the source is deleted (its directory stays). One transaction.

        With ``fold`` (a mount renaming a file it just created over another: a temporary file
        of one logical save) and a source with at most ``FOLD_MAX_VERSIONS`` versions, every
        one by ``actor``, the source's
        history is dropped instead of closed with a ``deleted`` version, so the save leaves
        exactly one version; that version names the source (``folded_id``), and the change feed
        reports the source deleted there. A source with the target's very content is not
        folded: no version would be written to carry that news.
        """
        who = actor or self.actor

        def run(tx: Tx) -> Memory:
            # Both rows, and the source's last versions for a fold, are asked for behind the
            # lock (one round trip on PostgreSQL). A temporary file of one save has a version
            # or two; looking at no more than that keeps this cheap for a file with thousands.
            lock = self._lock_only(tx, store_id, -1)
            source_of = self._memory_ahead(tx, store_id, source_id, content=True)
            target_of = self._memory_ahead(tx, store_id, target_id)
            last = self._last_actors(tx, source_id) if fold else None
            lock()
            source, target = source_of(), target_of()
            folded = self._drop_source(tx, store_id, source, target, last, who, actor)
            moved = Content.stored(source.content, source.content_sha256, source.size_bytes)
            return self._apply_update(
                tx,
                store_id,
                target,
                target.path,
                moved,
                actor,
                folded_id=source_id if folded else None,
            )

        saved = self._write(run)
        if self.db.dialect == "postgresql":  # the target as saved now, for its next save
            self._forget(source_id)
            self._remember(saved)
        return saved

    def _last_actors(self, tx: Tx, memory_id: str) -> Callable[[], list[Any]]:
        """Who made a memory's last versions, enough of them to tell a fold (``Tx.ahead``). A
        temporary file of one save has a version or two; looking at no more than that keeps
        this cheap for a file with thousands."""
        return tx.ahead(
            "SELECT actor FROM memory_versions WHERE memory_id = :id ORDER BY seq DESC LIMIT :n",
            {"id": memory_id, "n": FOLD_MAX_VERSIONS + 1},
        )

    def _drop_source(
        self,
        tx: Tx,
        store_id: str,
        source: Any,
        target: Any,
        last: Callable[[], list[Any]] | None,
        who: str,
        actor: str | None,
    ) -> bool:
        """The source of a rename over ``target`` goes: folded (its history dropped) when
        ``last`` says it is a temporary file of this save (see ``rename_over``), else closed
        with a ``deleted`` version; its directory stays. Whether it was folded."""
        now = utc_now()
        folded = False
        if last is not None and source.content_sha256 != target.content_sha256:
            actors = last()
            folded = len(actors) <= FOLD_MAX_VERSIONS and all(r.actor == who for r in actors)
        if folded:
            tx.run("DELETE FROM memory_versions WHERE memory_id = :id", {"id": source.id})
            tx.run("DELETE FROM memories WHERE id = :id", {"id": source.id})
            self._keep_directory(tx, store_id, source.path, now)
        else:
            self._remove_memory(tx, store_id, source, actor, now, keep_directory=True)
        return folded

    def take_back(
        self,
        store_id: str,
        memory_id: str,
        path: str,
        content: str | Content | None,
        *,
        backup_path: str,
        backup_sha256: str,
        source_id: str | None = None,
        fold: bool = False,
        actor: str | None = None,
    ) -> tuple[Memory, Memory]:
        """A save that backs the old file up first (``sed -i.bak``, ``perl -i.bak``, Emacs):
        ``memory_id`` was just renamed from ``path`` to ``backup_path``, and a new file is
        saved at ``path``. The memory goes back to ``path`` with the new content (one
        version), and ``backup_path`` becomes a new memory holding what it held there, so the
        path's history goes on under its own id, as a rename over it would keep it.

        ``source_id`` (``content`` None): the new file was saved as a memory of its own and
        then renamed to ``path`` (``perl -i.bak`` writes a file with a name like any other).
        Its content is the one taken, and it goes as in ``rename_over`` (``fold``: its history
        dropped if it is a temporary file of this save).

        One transaction; PreconditionFailed (nothing written) when the memory is no longer at
        ``backup_path`` with ``backup_sha256``. Returns the memory and the backup."""
        path, backup_path = validate_path(path), validate_path(backup_path)
        if (content is None) == (source_id is None):
            raise InvalidRequest("take_back takes a content or a source_id, not both")
        who = actor or self.actor

        def run(tx: Tx) -> tuple[Memory, Memory]:
            # With a source the count stays (the backup is new, the source goes): room is
            # needed only for a backup that adds a memory, as a create does.
            lock = (
                self._lock_and_count(tx, store_id)
                if source_id
                else self._lock_and_count(tx, store_id, +1, room_for=backup_path)
            )
            found = self._memory_ahead(tx, store_id, memory_id, content=True)
            source_of = source_id and self._memory_ahead(tx, store_id, source_id, content=True)
            last = self._last_actors(tx, source_id) if source_id and fold else None
            free = self._path_check(tx, store_id, path)
            policy, row = lock(), found()
            if row.path != backup_path or row.content_sha256 != backup_sha256:
                raise PreconditionFailed(
                    f"memory {memory_id} is at {row.path!r} with content_sha256 "
                    f"{row.content_sha256}, not at {backup_path!r} with {backup_sha256}"
                )
            free()
            folded = False
            if source_of:
                source = source_of()
                folded = self._drop_source(tx, store_id, source, row, last, who, actor)
                new = Content.stored(source.content, source.content_sha256, source.size_bytes)
            else:
                new = Content.from_text(content or "")
                _screen(policy, store_id, path, new.text, row.content)
            moved = self._apply_update(
                tx, store_id, row, path, new, actor, folded_id=source_id if folded else None
            )
            kept = Content.stored(row.content, row.content_sha256, row.size_bytes)
            return moved, self._insert_memory(tx, store_id, backup_path, kept, actor)

        moved, backup = self._write(run)
        if self.db.dialect == "postgresql":
            if source_id is not None:
                self._forget(source_id)
            self._remember(moved)
        return moved, backup

    def move_directory(self, store_id: str, old: str, new: str, *, actor: str | None = None) -> int:
        """Move a directory and everything under it (one ``renamed`` version per memory) in one
        transaction. ``new`` may be an empty directory, which is replaced. Returns how many
        memories moved."""
        old_prefix = as_prefix(validate_path(old.rstrip("/") or "/"))
        new_prefix = as_prefix(validate_path(new.rstrip("/") or "/"))
        if new_prefix.startswith(old_prefix):
            raise InvalidRequest(f"cannot move directory {old_prefix!r} into itself")
        old_range = {"store": store_id, "lo": old_prefix, "hi": prefix_upper_bound(old_prefix)}
        new_range = {"store": store_id, "lo": new_prefix, "hi": prefix_upper_bound(new_prefix)}
        moved: list[Memory] = []

        def run(tx: Tx) -> int:
            moved.clear()  # a transaction tried again starts over
            self._lock_only(tx, store_id)()
            moving = tx.all(
                f"SELECT {_MEMORY_COLS}, {_MEMORY_CONTENT} FROM memories WHERE store_id = :store "
                "AND path >= :lo AND path < :hi ORDER BY path",
                old_range,
            )
            dirs = [
                r.path
                for r in tx.all(
                    "SELECT path FROM directories WHERE store_id = :store AND path >= :lo "
                    "AND path < :hi",
                    old_range,
                )
            ]
            if not moving and not dirs:
                raise NotFound(f"no directory {old_prefix!r} in store {store_id!r}")
            occupant = tx.scalar(
                "SELECT path FROM memories WHERE store_id = :store AND path >= :lo "
                "AND path < :hi ORDER BY path LIMIT 1",
                new_range,
            ) or tx.scalar(
                "SELECT path FROM directories WHERE store_id = :store AND path > :lo "
                "AND path < :hi ORDER BY path LIMIT 1",
                new_range,
            )
            if occupant is not None:
                raise Conflict(f"directory {new_prefix!r} is not empty (it holds {occupant!r})")
            target_file = new_prefix[:-1]
            at, params = _memories_at(
                [target_file, *(p[:-1] for p in ancestor_prefixes(target_file))], "path"
            )
            blocker = tx.scalar(at, params | {"store": store_id})
            if blocker is not None:
                raise Conflict(f"{blocker!r} is a memory, so {new_prefix!r} cannot be a directory")
            now = utc_now()
            tx.run("DELETE FROM directories WHERE store_id = :store AND path = :lo", new_range)
            for row in moving:
                path = new_prefix + row.path[len(old_prefix) :]
                moved.append(self._apply_update(tx, store_id, row, path, None, actor))
            tx.run(
                "DELETE FROM directories WHERE store_id = :store AND path >= :lo AND path < :hi",
                old_range,
            )
            for path in dirs:
                tx.run(
                    "INSERT INTO directories (store_id, path, created_at) "
                    "VALUES (:store, :path, :now)",
                    {"store": store_id, "path": new_prefix + path[len(old_prefix) :], "now": now},
                )
            self._keep_directory(tx, store_id, old_prefix[:-1], now)
            return len(moving)

        count = self._write(run)
        if self.db.dialect == "postgresql":
            for memory in moved:  # remembered at the old path: remembered at the new one
                if memory.id in self._saved:
                    self._remember(memory)
        return count
