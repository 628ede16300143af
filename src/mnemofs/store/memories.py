"""Memories and directories: create, read, update (content, path), delete, list by prefix."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
)
from mnemofs.models import (
    Actor,
    Memory,
    MemoryId,
    MemoryPrefix,
    MemoryVersion,
    Page,
    StoreId,
    VersionId,
    View,
)
from mnemofs.paths import (
    ROOT,
    prefix_upper_bound,
    validate_path,
    validate_prefix,
)
from mnemofs.store.base import _VERSION_INSERT, ServiceBase
from mnemofs.store.directories import (
    FIRST_INSIDE,
    NOTHING_INSIDE,
    directory_room,
    keep_emptied_directory,
)
from mnemofs.store.rows import (
    _AS_SAVED,
    _MEMORY_COLS,
    _STORE_AS_SEEN,
    _STORE_COUNTED,
    _STORE_LIVE,
    BY_ID_IN_STORE,
    _as_saved,
    _Assumed,
    _decode_cursor,
    _encode_cursor,
    _locked,
    _memory,
    _path_free,
    _placeholders,
    _precondition_hash,
    _screen,
    _validate_limit,
    utc_now,
)
from mnemofs.store.searchmarks import MOVED_VECTOR
from mnemofs.store.texts import _MEMORY_CONTENT
from mnemofs.store.tx import GuardFailed, Tx

_IDS_PER_QUERY = 500  # ids in one IN list (``get_memories``): far below either database's cap

# PostgreSQL, changes over this service's last save of a memory, after the store's lock (a
# statement of its own: this one's snapshot then holds what the lock waited for): with a
# rename's new path free ({free}), the row moved or deleted while it is as that save left it
# (``_AS_SAVED``), its version written and ({keep}) the directory it leaves kept, as one
# statement (~15 µs of the server's work per statement saved). No row changed is a division
# by zero: ``GuardFailed``, and nothing written.
_RENAME_AS_SAVED = (
    "WITH m AS (UPDATE memories SET path = :path, updated_at = :now, head_version_id = :version, "
    f"{MOVED_VECTOR['postgresql']}accessed_at = :now WHERE {_AS_SAVED} AND {{free}} RETURNING id), "
    f"v AS ({_VERSION_INSERT}){{keep}} SELECT 1 / count(*)::int FROM m"
)
_DELETE_AS_SAVED = (
    f"WITH d AS (DELETE FROM memories WHERE {_AS_SAVED} RETURNING id), "
    f"v AS ({_VERSION_INSERT}){{keep}} SELECT 1 / count(*)::int FROM d"
)
# mkdir on PostgreSQL, after the store's lock: the directory made if the path is free ({free})
# and the store has room for one more.
_MKDIR_AS_SEEN = (
    "WITH d AS (INSERT INTO directories (store_id, path, created_at) SELECT :store, :dir, :now "
    "FROM memory_stores WHERE id = :store AND directory_count < :most AND {free} "
    "RETURNING path) SELECT 1 / count(*)::int FROM d"
)


class MemoriesMixin(ServiceBase):
    """Memories and directories: create, read, update (content, path), delete, list by prefix."""

    def create_memory(
        self, store_id: str, path: str, content: str | Content, *, actor: str | None = None
    ) -> Memory:
        """Create a memory; never overwrites (an existing path is a conflict)."""
        path = validate_path(path)
        new = Content.from_text(content)

        def run(tx: Tx) -> Memory:
            policy = self._change_store(tx, store_id, +1, room_for=path)
            _screen(policy, store_id, path, new.text)
            self._path_check(tx, store_id, path)()
            return self._insert_memory(tx, store_id, path, new, actor)

        return self._write(run)

    def get_memory(self, store_id: str, memory_id: str, *, count_access: bool = True) -> Memory:
        """A memory with its content; a read that counts as an access (``note_access``)
        unless ``count_access`` is False (a mount catching up with changes is no reader)."""

        def run(tx: Tx) -> Memory:
            row = self._memory_row(tx, store_id, memory_id, content=True)
            return _memory(row, row.content)

        memory = self._read(run)
        if count_access:
            self.note_access(store_id, memory.id)
        return memory

    def get_memories(self, store_id: str, memory_ids: Sequence[str]) -> dict[MemoryId, Memory]:
        """The memories of ``memory_ids`` still in the store, with their content, by id; the
        others are left out. One read for a mount or sync worker catching up on many changes
        (through a server, one request instead of one each), so no access is counted. A store
        that is not there is NotFound."""
        wanted = list(dict.fromkeys(memory_ids))
        if not wanted:
            return {}

        def run(tx: Tx) -> dict[MemoryId, Memory]:
            found: dict[MemoryId, Memory] = {}
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                in_list, params = _placeholders("m", wanted[start : start + _IDS_PER_QUERY])
                for row in tx.all(
                    f"SELECT {_MEMORY_COLS}, {_MEMORY_CONTENT} FROM memories "
                    f"WHERE id IN ({in_list}) AND store_id || '' = :store",
                    {**params, "store": store_id},
                ):
                    found[MemoryId(row.id)] = _memory(row, row.content)
            if not found:
                self._store_row(tx, store_id)  # NotFound if it is the store that is missing
            return found

        return self._read(run)

    def find_memory(self, store_id: str, path: str, *, count_access: bool = True) -> Memory:
        """The memory at ``path``, with its content (a read: counts as an access, unless
        ``count_access`` is False)."""
        path = validate_path(path)

        def run(tx: Tx) -> Memory:
            row = tx.one(
                f"SELECT {_MEMORY_COLS}, {_MEMORY_CONTENT} FROM memories "
                "WHERE store_id = :store AND path = :path",
                {"store": store_id, "path": path},
            )
            if row is None:
                self._store_row(tx, store_id)
                raise NotFound(f"no memory at {path!r} in store {store_id!r}")
            return _memory(row, row.content)

        memory = self._read(run)
        if count_access:
            self.note_access(store_id, memory.id)
        return memory

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | Content | None = None,
        path: str | None = None,
        precondition: Mapping[str, str] | str | None = None,
        actor: str | None = None,
        keep_directory: bool = False,
    ) -> Memory:
        """Change content, path (a rename), or both, in one version.

        With a precondition the change applies only while the stored hash still matches.
        A change to exactly what is stored writes no version and returns the memory as it is.
        ``keep_directory`` keeps a directory that a rename empties (as a filesystem does).
        """
        if content is None and path is None:
            raise InvalidRequest("nothing to update: give content, a path or both")
        if path is not None:
            path = validate_path(path)
        new = None if content is None else Content.from_text(content)
        wanted = _precondition_hash(precondition)
        if new is None and path is not None and wanted is None and self.db.dialect == "postgresql":
            with suppress(GuardFailed):
                return self._rename_over_last(store_id, memory_id, path, actor, keep_directory)

        def run(tx: Tx) -> Memory:
            # The row and the new path's check are asked for behind the lock (one round trip
            # on PostgreSQL); the check counts only if the path changes.
            # A rename needs none of the store's rules (``_lock_only``).
            locking = self._lock_and_count if new is not None else self._lock_only
            lock = locking(tx, store_id)
            found = self._memory_ahead(tx, store_id, memory_id, content=True)
            check = None if path is None else self._path_check(tx, store_id, path, ignore=memory_id)
            policy, row = lock(), found()
            if wanted is not None and row.content_sha256 != wanted:
                raise PreconditionFailed(
                    f"memory {memory_id} at {row.path!r} has content_sha256 "
                    f"{row.content_sha256}, not {wanted}"
                )
            new_path = row.path if path is None else path
            if new is not None and new.sha256 != row.content_sha256:
                assert policy is not None  # locked with its rules
                _screen(policy, store_id, new_path, new.text, row.content)
            if check is not None and new_path != row.path:
                check()
            return self._apply_update(
                tx, store_id, row, new_path, new, actor, keep_directory=keep_directory
            )

        updated = self._write(run)
        if self.db.dialect == "postgresql":
            self._remember(updated)
        return updated

    def _rename_over_last(
        self, store_id: str, memory_id: str, path: str, actor: str | None, keep_directory: bool
    ) -> Memory:
        """PostgreSQL: a rename of a memory this service saved last, in one round trip, as
        ``SavesMixin._save_over_last`` saves: the new path's check is one more condition of
        the writes (no row of ``_path_check``'s query but the memory's own). ``GuardFailed``
        as there."""
        seen, last = self._seen.get(store_id), self._saved.get(memory_id)
        if seen is None or last is None or last.path == path:
            raise GuardFailed("nothing to assume")
        free, where = _path_free(store_id, path, memory_id)
        where |= {"secrets": seen.secrets, "cap": seen.max_content_bytes}

        def run(tx: Tx) -> Memory:
            tx.guard(_locked(_STORE_AS_SEEN), where)
            tx.tell(store_id)
            now = utc_now()
            sha, size = last.content_sha256, last.size_bytes
            params = self._version_params(
                store_id, memory_id, "renamed", path, sha, size, now, actor
            )
            keep, was = _as_saved(last, keep_directory)
            tx.guard(_RENAME_AS_SAVED.format(keep=keep, free=free), params | was | where)
            return Memory(
                id=MemoryId(memory_id),
                memory_store_id=StoreId(store_id),
                path=path,
                content_sha256=sha,
                content_size_bytes=size,
                memory_version_id=VersionId(params["version"]),
                created_at=last.created_at,
                updated_at=now,
                content=last.content,
            )

        try:
            memory = self._write(run)
        except GuardFailed:
            self._forget(memory_id)
            raise
        self._remember(memory)
        return memory

    def delete_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_content_sha256: str | None = None,
        actor: str | None = None,
        keep_directory: bool = False,
        archived_ok: bool = False,
    ) -> MemoryVersion:
        """Delete a memory; its versions stay, and a ``deleted`` version records who and when.

        With ``expected_content_sha256`` the delete applies only while the stored hash still
        matches. ``keep_directory`` keeps the memory's directory as an explicit one if this was
        the last memory in it (a filesystem's ``rm a/b`` leaves ``a/`` in place).
        ``archived_ok`` deletes from an archived store too (the HTTP API's rule: archiving stops
        new content, not clean-up).
        """
        wanted = _precondition_hash(expected_content_sha256, "expected_content_sha256")
        live = "" if archived_ok else _STORE_LIVE
        if self.db.dialect == "postgresql":
            last = self._saved.get(memory_id)
            self._forget(memory_id)  # deleted now, or not this memory as remembered
            if last is not None and wanted in (None, last.content_sha256):
                with suppress(GuardFailed):
                    return self._delete_as_saved(store_id, last, live, actor, keep_directory)

        def run(tx: Tx) -> MemoryVersion:
            # The row is asked for behind the lock (one round trip on PostgreSQL). Without a
            # precondition it is deleted right there: the DELETE returns what the version
            # needs (~10% of a SQLite delete, decisions.md); a failed lock rolls it back.
            lock = self._lock_only(tx, store_id, -1, archived_ok=archived_ok)
            if wanted is None:
                gone = tx.ahead(
                    f"DELETE FROM memories WHERE {BY_ID_IN_STORE} RETURNING id, path",
                    {"id": memory_id, "store": store_id},
                )
                lock()
                if rows := gone():
                    return self._delete_row(tx, store_id, rows[0], actor, keep_directory, gone=True)
                self._no_memory(tx, store_id, memory_id)
            found = self._memory_ahead(tx, store_id, memory_id)
            lock()
            row = found()
            if row.content_sha256 != wanted:
                raise PreconditionFailed(
                    f"memory {memory_id} at {row.path!r} has content_sha256 "
                    f"{row.content_sha256}, not {wanted}: not deleted"
                )
            return self._delete_row(tx, store_id, row, actor, keep_directory)

        return self._write(run)

    def _delete_as_saved(
        self,
        store_id: str,
        last: _Assumed,
        live: str,
        actor: str | None,
        keep_directory: bool,
    ) -> MemoryVersion:
        """PostgreSQL: a delete of a memory this service saved last, in one round trip, as
        ``SavesMixin._save_over_last`` saves: the store counted (and live, unless an archived
        one may be cleaned up) and the memory as that save left it are guards
        sent with the writes. ``GuardFailed`` as there; the careful delete then decides."""

        def run(tx: Tx) -> MemoryVersion:
            tx.guard(_locked(_STORE_COUNTED.format(live=live)), {"store": store_id, "delta": -1})
            tx.tell(store_id)
            now = utc_now()
            params = self._version_params(
                store_id, last.id, "deleted", last.path, None, 0, now, actor
            )
            keep, was = _as_saved(last, keep_directory)
            tx.guard(_DELETE_AS_SAVED.format(keep=keep), params | was)
            return self._deleted(store_id, last, params["version"], now, actor)

        return self._write(run)

    def _delete_row(
        self,
        tx: Tx,
        store_id: str,
        row: Any,
        actor: str | None,
        keep_directory: bool,
        *,
        gone: bool = False,
    ) -> MemoryVersion:
        """Remove the memory ``row`` (its store locked and counted; ``gone``: removed already)
        and return its 'deleted' version as the API does."""
        now = utc_now()
        close = self._close_memory if gone else self._remove_memory
        version_id = close(tx, store_id, row, actor, now, keep_directory=keep_directory)
        return self._deleted(store_id, row, version_id, now, actor)

    def _deleted(
        self, store_id: str, row: Any, version_id: str, now: str, actor: str | None
    ) -> MemoryVersion:
        """The 'deleted' version of ``row`` (its id and path) as the API returns it."""
        return MemoryVersion(
            id=VersionId(version_id),
            memory_store_id=StoreId(store_id),
            memory_id=MemoryId(row.id),
            operation="deleted",
            path=row.path,
            content_sha256=None,
            content_size_bytes=None,
            created_at=now,
            created_by=Actor.from_stored(actor or self.actor),
        )

    def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str = ROOT,
        depth: int | None = 0,
        view: View = "basic",
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        cursor: str | None = None,
    ) -> Page[Memory | MemoryPrefix]:
        """Memories under ``path_prefix`` in path order, with content in the full view.

        ``depth`` 0 (or None) lists the whole subtree; 1 lists immediate children, where child
        directories appear as ``MemoryPrefix`` entries.
        """
        prefix = validate_prefix(path_prefix)
        if depth is None:
            depth = 0
        if depth not in (0, 1) or isinstance(depth, bool):
            raise InvalidRequest(f"depth must be 0 (whole subtree) or 1 (children), got {depth!r}")
        limit = _validate_limit(limit, view)
        full = view == "full"
        query = json.dumps(["memories", store_id, prefix, depth])
        after = _decode_cursor(query, cursor)

        def run(tx: Tx) -> Page[Memory | MemoryPrefix]:
            self._store_row(tx, store_id)
            entries: list[Memory | MemoryPrefix]
            if depth == 0:
                rows = self._range(tx, store_id, prefix, after, limit + 1, content=full)
                entries = [_memory(r, r.content if full else None) for r in rows]
            else:
                entries = self._children(tx, store_id, prefix, after, limit + 1, content=full)
            data = entries[:limit]
            more = len(entries) > limit
            return Page(
                data,
                _encode_cursor(query, data[-1].path) if more else None,
                lambda c: self.list_memories(
                    store_id, path_prefix=prefix, depth=depth, view=view, limit=limit, cursor=c
                ),
            )

        return self._read(run)

    @staticmethod
    def _range(
        tx: Tx, store_id: str, prefix: str, after: str | None, limit: int, *, content: bool = False
    ) -> list[Any]:
        """Memories under ``prefix`` in path order, past the listing key ``after``."""
        if after is None:
            low, op = prefix, ">="
        elif after.endswith("/"):  # a directory was listed last: skip everything under it
            low, op = prefix_upper_bound(after), ">="
        else:
            low, op = after, ">"
        cols = _MEMORY_COLS + (f", {_MEMORY_CONTENT}" if content else "")
        return tx.all(
            f"SELECT {cols} FROM memories WHERE store_id = :store AND path {op} :low "
            "AND path < :high ORDER BY path LIMIT :limit",
            {"store": store_id, "low": low, "high": prefix_upper_bound(prefix), "limit": limit},
        )

    def _children(
        self,
        tx: Tx,
        store_id: str,
        prefix: str,
        after: str | None,
        want: int,
        *,
        content: bool = False,
    ) -> list[Memory | MemoryPrefix]:
        """Up to ``want`` immediate children of ``prefix`` past ``after``, in path order.

        Reads memories in path order and, on meeting a subdirectory, emits it once and seeks past
        its subtree, so the cost follows the number of children, not the size of the subtree.
        Explicit (mkdir) directories are merged in.
        """
        found: dict[str, Memory | MemoryPrefix] = {}
        cursor = after
        batch = 4  # small after a seek (the next row may open another directory), grows on files
        while len(found) < want:
            asked = min(batch, want - len(found))
            rows = self._range(tx, store_id, prefix, cursor, asked, content=content)
            for row in rows:
                rest = row.path[len(prefix) :]
                slash = rest.find("/")
                if slash < 0:
                    found[row.path] = _memory(row, row.content if content else None)
                    cursor = row.path
                    continue
                child = prefix + rest[: slash + 1]
                found[child] = MemoryPrefix(child)
                cursor = child
                batch = 4
                break  # seek past the child's subtree
            else:
                if len(rows) < asked:
                    break
                batch = min(batch * 4, 256)
        low = prefix if after is None else after
        if after is not None and after.endswith("/"):
            low = prefix_upper_bound(after)
        for row in tx.all(
            "SELECT path FROM directories WHERE store_id = :store AND path > :low "
            "AND path < :high ORDER BY path",
            {"store": store_id, "low": low, "high": prefix_upper_bound(prefix)},
        ):
            rest = row.path[len(prefix) :]
            child = prefix + rest[: rest.find("/") + 1]
            if after is None or child > after:
                found.setdefault(child, MemoryPrefix(child))
        return [found[key] for key in sorted(found)][:want]

    def make_directory(self, store_id: str, path: str) -> MemoryPrefix:
        """Make an explicit directory (``mkdir``): it persists while empty, until removed."""
        path = validate_path(path.rstrip("/") or "/")
        prefix = path + "/"
        made = {"store": store_id, "path": prefix}

        def insert(tx: Tx) -> MemoryPrefix:
            tx.run(
                "INSERT INTO directories (store_id, path, created_at) VALUES (:store, :path, :now)",
                made | {"now": utc_now()},
            )
            return MemoryPrefix(prefix)

        if self.db.dialect == "postgresql":
            # One round trip: what the careful way asks first (a live store, then a free path
            # and room) goes out as the lock's guard and the INSERT's conditions; if one fails
            # nothing is written and the careful way says why.
            free, where = _path_free(store_id, path, None)
            where |= {"delta": 0, "dir": prefix, "most": limits.MAX_DIRECTORIES_PER_STORE}

            def guarded(tx: Tx) -> MemoryPrefix:
                tx.guard(_locked(_STORE_COUNTED.format(live=_STORE_LIVE)), where)
                tx.tell(store_id)
                tx.guard(_MKDIR_AS_SEEN.format(free=free), where | {"now": utc_now()})
                return MemoryPrefix(prefix)

            with suppress(GuardFailed):
                return self._write(guarded)

        def run(tx: Tx) -> MemoryPrefix:
            lock, check = self._lock_only(tx, store_id), self._path_check(tx, store_id, path)
            lock()  # the check went out behind the lock: one round trip on PostgreSQL
            check()
            directory_room(tx, store_id, prefix)
            return insert(tx)

        return self._write(run)

    def remove_directory(self, store_id: str, path: str, *, keep_directory: bool = False) -> None:
        """Remove an empty directory (``rmdir``); a directory with anything in it is a conflict.
        ``keep_directory`` keeps the directory holding it, as a filesystem's rmdir does."""
        path = validate_path(path.rstrip("/") or "/")
        prefix = path + "/"
        params = {"store": store_id, "lo": prefix, "hi": prefix_upper_bound(prefix)}

        def keep(tx: Tx) -> None:
            if keep_directory:
                keep_emptied_directory(tx, store_id, path, utc_now())

        remove = "DELETE FROM directories WHERE store_id = :store AND path = :lo RETURNING path"
        if self.db.dialect == "postgresql":
            # One round trip, as mkdir (there): a live store, nothing inside, one row removed.
            def guarded(tx: Tx) -> None:
                tx.guard(_locked(_STORE_COUNTED.format(live=_STORE_LIVE)), params | {"delta": 0})
                tx.tell(store_id)
                tx.guard(NOTHING_INSIDE, params)
                tx.guard(f"WITH d AS ({remove}) SELECT 1 / count(*)::int FROM d", params)
                keep(tx)

            with suppress(GuardFailed):
                return self._write(guarded)

        def run(tx: Tx) -> None:
            # All three go out together (one round trip on PostgreSQL, then the commit); the
            # delete is undone with the transaction if the directory turns out not empty.
            lock = self._lock_only(tx, store_id)
            inside = tx.ahead(FIRST_INSIDE, params)
            deleted = tx.ahead(remove, params)
            lock()
            if rows := inside():
                raise Conflict(f"directory {prefix!r} is not empty (it holds {rows[0].path!r})")
            if not deleted():
                raise NotFound(f"no directory {prefix!r} in store {store_id!r}")
            keep(tx)

        self._write(run)
