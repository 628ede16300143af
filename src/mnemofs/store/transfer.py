"""Export a store as records, and import records as a new store (issue 18).

An export is one read transaction (a snapshot: REPEATABLE READ on PostgreSQL), streamed a page
at a time to the caller's ``emit``, so memory stays flat whatever the store's size. An import
is one write transaction: the store appears whole or not at all. It writes the versions as they
come (a page at a time), makes each live memory from its head version, then runs the store's
``db check`` before it commits; anything wrong rolls everything back.

Ids: ``keep_ids`` keeps every id (refused if one is already taken). Otherwise the store gets a
fresh id, and each memory and version one derived from its old id and a secret of this import
(the same old id always maps to the same new one, so a version still names its memory, and no
table of ids is held in memory); the time part of the ULID is kept, so ids still sort by time.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import Conflict, LimitExceeded, NotFound
from mnemofs.models import (
    _BASE32,
    MEMORY_PREFIX,
    STORE_PREFIX,
    VERSION_PREFIX,
    MemoryStore,
    new_id,
)
from mnemofs.store.base import ServiceBase
from mnemofs.store.check import check
from mnemofs.store.records import (
    BadRecord,
    DirectoryRecord,
    MemoryRecord,
    Record,
    StoreRecord,
    VersionRecord,
    check_directory,
    check_memory,
    check_store,
    check_version,
    where,
)
from mnemofs.store.rows import _placeholders, _store
from mnemofs.store.texts import _content_of, _put_content
from mnemofs.store.tx import Tx

PAGE = 256  # rows read or written per statement
_ORDER = {StoreRecord: 0, DirectoryRecord: 1, VersionRecord: 2, MemoryRecord: 3}
_NAMES = ("store", "directory", "version", "memory")

_VERSION_SELECT = (
    f"SELECT v.seq, v.id, v.memory_id, v.operation, v.path, {_content_of('v')}, "
    "v.content_sha256, v.size_bytes, v.created_at, v.actor, v.redacted_at, v.redacted_by, "
    "v.folded_id FROM memory_versions v"
)


class TransferMixin(ServiceBase):
    """Stores out to records and back."""

    def export_store(
        self, store_id: str, emit: Callable[[Record], None], *, heads_only: bool = False
    ) -> dict[str, int]:
        """Give ``emit`` the store's records in import order; return how many of each.
        ``heads_only``: each live memory's head as its only version (a ``created`` one)."""

        def run(tx: Tx) -> dict[str, int]:
            counts = dict.fromkeys(("directories", "versions", "memories"), 0)
            row = self._store_row(tx, store_id)
            emit(
                StoreRecord(
                    id=row.id,
                    name=row.name,
                    description=row.description,
                    metadata=json.loads(row.metadata),
                    kind=row.kind,
                    owner=row.owner,
                    on_full=row.on_full,
                    secrets=row.secrets,
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                    archived_at=row.archived_at,
                    pruned_before=tx.scalar(
                        "SELECT pruned_before FROM memory_stores WHERE id = :id", {"id": store_id}
                    ),
                    max_memories=row.max_memories,
                    max_content_bytes=row.max_content_bytes,
                )
            )
            directories = "SELECT path, created_at FROM directories WHERE store_id = :store"
            for d in _pages(tx, directories, "path", "path", store_id, ""):
                emit(DirectoryRecord(path=d.path, created_at=d.created_at))
                counts["directories"] += 1
            if heads_only:
                heads = (
                    _VERSION_SELECT + " JOIN memories m ON v.id = m.head_version_id "
                    "WHERE m.store_id = :store"
                )
                for v in _pages(tx, heads, "m.id", "memory_id", store_id, ""):
                    emit(_version_record(v, operation="created"))
                    counts["versions"] += 1
            else:
                versions = _VERSION_SELECT + " WHERE v.store_id = :store"
                for v in _pages(tx, versions, "v.seq", "seq", store_id, -1):
                    emit(_version_record(v))
                    counts["versions"] += 1
            memories = (
                "SELECT id, path, content_sha256, size_bytes, created_at, updated_at, "
                "accessed_at, head_version_id FROM memories m WHERE m.store_id = :store"
            )
            for m in _pages(tx, memories, "m.id", "id", store_id, ""):
                emit(
                    MemoryRecord(
                        id=m.id,
                        path=m.path,
                        content_sha256=m.content_sha256,
                        size_bytes=m.size_bytes,
                        created_at=m.created_at,
                        updated_at=m.updated_at,
                        accessed_at=m.accessed_at,
                        head_version_id=m.head_version_id,
                    )
                )
                counts["memories"] += 1
            return counts

        return self.db.run(run, write=False, once=True, snapshot=True)

    def export_size(self, store_id: str, *, heads_only: bool = False) -> int:
        """How many records an export of the store holds (for a progress bar)."""

        def run(tx: Tx) -> int:
            row = self._store_row(tx, store_id)
            directories = tx.scalar(
                "SELECT COUNT(*) FROM directories WHERE store_id = :s", {"s": store_id}
            )
            versions = (
                row.memory_count
                if heads_only
                else tx.scalar(
                    "SELECT COUNT(*) FROM memory_versions WHERE store_id = :s", {"s": store_id}
                )
            )
            return 1 + int(directories) + int(versions) + int(row.memory_count)

        return self._read(run)

    def import_store(
        self,
        open_records: Callable[[], Iterator[Record]],
        *,
        name: str | None = None,
        keep_ids: bool = False,
    ) -> MemoryStore:
        """A new store from records (``open_records`` gives them from the start each time it
        is called), in one transaction; ``name`` replaces the exported one."""
        ids = _Ids(keep_ids)

        def run(tx: Tx) -> MemoryStore:
            records = open_records()
            first = next(records, None)
            if not isinstance(first, StoreRecord):
                raise BadRecord("an export begins with its store record; this one does not")
            check_store(first)
            store_id = first.id if keep_ids else new_id(STORE_PREFIX)
            taken = "SELECT 1 FROM memory_stores WHERE id = :id"
            if keep_ids and tx.scalar(taken, {"id": store_id}):
                raise Conflict(
                    f"store {store_id} already exists in this database; import without "
                    "--keep-ids to give the copy new ids"
                )
            _insert_store(tx, store_id, first, name)
            writer = _Writer(tx, store_id, ids)
            phase = 0
            for record in records:
                kind = _ORDER[type(record)]
                if kind < phase:
                    raise BadRecord(
                        f"{where(record)}a {_NAMES[kind]} record after the {_NAMES[phase]} "
                        "records: an export lists the store, directories, versions, memories"
                    )
                if kind == 0:
                    raise BadRecord(f"{where(record)}a second store record")
                if kind != phase:
                    writer.flush()
                    if kind == 3 and tx.dialect == "postgresql" and writer.versions > PAGE:
                        # The planner still sees the versions table as it was before this
                        # transaction (empty, perhaps): without fresh statistics each memory's
                        # head lookup below became a scan of every version (measured: 100,000
                        # versions imported at 1,600/s instead of 10,000/s).
                        tx.run("ANALYZE memory_versions")
                    phase = kind
                writer.add(record)
            writer.flush()
            if writer.directories > limits.MAX_DIRECTORIES_PER_STORE:
                raise LimitExceeded(
                    f"the export holds {writer.directories} directories, over the limit of "
                    f"{limits.MAX_DIRECTORIES_PER_STORE} per store"
                )
            if writer.memories > limits.MAX_MEMORIES_PER_STORE:
                raise LimitExceeded(
                    f"the export holds {writer.memories} live memories, over the limit of "
                    f"{limits.MAX_MEMORIES_PER_STORE} per store"
                )
            tx.run(
                "UPDATE memory_stores SET memory_count = :n WHERE id = :id",
                {"n": writer.memories, "id": store_id},
            )
            if tx.dialect == "postgresql" and writer.memories > PAGE:
                tx.run("ANALYZE memories")  # as above: the check joins memories with itself
            report = check(tx, store_id)
            if not report.ok:
                shown = "; ".join(report.problems[:3])
                more = f" (and {len(report.problems) - 3} more)" if len(report.problems) > 3 else ""
                raise BadRecord(f"the imported store would not be consistent: {shown}{more}")
            return _store(self._store_row(tx, store_id))

        try:
            store: MemoryStore = self._write_once(run)
            return store
        except NotFound as exc:  # a head or a version that is not where the export says
            raise BadRecord(exc.message) from None

    def _write_once(self, fn: Callable[[Tx], Any]) -> Any:
        result = self.db.run(fn, write=True, once=True)
        self.search_trail.wrote()
        return result


class _Ids:
    """The ids an import gives: the exported ones, or new ones derived from them."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self._secret = os.urandom(16)

    def __call__(self, prefix: str, old: str | None) -> str | None:
        if old is None or self.keep:
            return old
        digest = hashlib.blake2b(old.encode(), key=self._secret, digest_size=10).digest()
        value = int.from_bytes(digest, "big")
        random = "".join(_BASE32[(value >> shift) & 31] for shift in range(75, -1, -5))
        return prefix + old[len(prefix) : len(prefix) + 10] + random


class _Writer:
    """Writes an import's records a page at a time."""

    def __init__(self, tx: Tx, store_id: str, ids: _Ids) -> None:
        self.tx = tx
        self.store_id = store_id
        self.ids = ids
        self.pending: list[Any] = []
        self.memories = 0
        self.versions = 0
        self.directories = 0

    def add(self, record: Record) -> None:
        self.pending.append(record)
        if len(self.pending) >= PAGE:
            self.flush()

    def flush(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        if isinstance(batch[0], DirectoryRecord):
            self._directories(batch)
        elif isinstance(batch[0], VersionRecord):
            self._versions(batch)
        else:
            self._memories(batch)

    def _directories(self, batch: list[DirectoryRecord]) -> None:
        for record in batch:
            check_directory(record)
        self.directories += len(batch)
        self.tx.many(
            "INSERT INTO directories (store_id, path, created_at) VALUES (:store, :path, :at)",
            [{"store": self.store_id, "path": r.path, "at": r.created_at} for r in batch],
        )

    def _versions(self, batch: list[VersionRecord]) -> None:
        for record in batch:
            check_version(record)
        self.versions += len(batch)
        if self.ids.keep:
            self._refuse_taken(batch, "memory_versions", "id", [r.id for r in batch])
            # A memory's versions may span pages: only another store's versions count.
            self._refuse_taken(
                batch,
                "memory_versions",
                "memory_id",
                sorted({r.memory_id for r in batch}),
                other_stores=True,
            )
        ids = self.ids
        texts = {  # each text once (checked against its hash above)
            r.content_sha256: Content.stored(r.content, r.content_sha256, r.size_bytes)
            for r in batch
            if r.content is not None and r.content_sha256 is not None
        }
        _put_content(self.tx, self.store_id, *texts.values())
        self.tx.many(
            "INSERT INTO memory_versions (id, store_id, memory_id, operation, path, "
            "content_sha256, size_bytes, created_at, actor, redacted_at, redacted_by, folded_id) "
            "VALUES (:id, :store, :memory, :op, :path, :sha, :size, :at, :actor, "
            ":redacted_at, :redacted_by, :folded)",
            [
                {
                    "id": ids(VERSION_PREFIX, r.id),
                    "store": self.store_id,
                    "memory": ids(MEMORY_PREFIX, r.memory_id),
                    "op": r.operation,
                    "path": r.path,
                    "sha": r.content_sha256,
                    "size": r.size_bytes,
                    "at": r.created_at,
                    "actor": r.actor,
                    "redacted_at": r.redacted_at,
                    "redacted_by": r.redacted_by,
                    "folded": ids(MEMORY_PREFIX, r.folded_id),
                }
                for r in batch
            ],
        )

    def _memories(self, batch: list[MemoryRecord]) -> None:
        for record in batch:
            check_memory(record)
        if self.ids.keep:
            self._refuse_taken(batch, "memories", "id", [r.id for r in batch])
        ids = self.ids
        # Each memory from its head version, which must be its own, live, with the path and
        # hash the record says (the content is not in the file twice).
        written = self.tx.many(
            "INSERT INTO memories (id, store_id, path, content_sha256, size_bytes, "
            "created_at, updated_at, head_version_id, accessed_at) "
            "SELECT v.memory_id, v.store_id, v.path, v.content_sha256, v.size_bytes, "
            ":created, :updated, v.id, :accessed FROM memory_versions v "
            "WHERE v.id = :head AND v.memory_id = :id AND v.store_id = :store "
            "AND v.operation <> 'deleted' AND v.content_sha256 IS NOT NULL "
            "AND v.path = :path AND v.content_sha256 = :sha",
            [
                {
                    "id": ids(MEMORY_PREFIX, r.id),
                    "store": self.store_id,
                    "head": ids(VERSION_PREFIX, r.head_version_id),
                    "path": r.path,
                    "sha": r.content_sha256,
                    "created": r.created_at,
                    "updated": r.updated_at,
                    "accessed": r.accessed_at,
                }
                for r in batch
            ],
        )
        if written != len(batch):
            self._name_bad_head(batch)
        self.memories += len(batch)

    def _name_bad_head(self, batch: list[MemoryRecord]) -> None:
        for r in batch:
            head = self.ids(VERSION_PREFIX, r.head_version_id)
            if not self.tx.scalar(
                "SELECT 1 FROM memories WHERE head_version_id = :head AND store_id = :store",
                {"head": head, "store": self.store_id},
            ):
                raise BadRecord(
                    f"{where(r)}memory {r.id}: its head {r.head_version_id} is not one of its "
                    f"live versions in this export at {r.path!r} with that content_sha256"
                )
        raise BadRecord("a memory's head is not one of its live versions in this export")

    def _refuse_taken(
        self,
        batch: list[Any],
        table: str,
        column: str,
        values: list[str],
        *,
        other_stores: bool = False,
    ) -> None:
        inside, params = _placeholders("v", values)
        elsewhere = " AND store_id <> :store" if other_stores else ""
        taken = self.tx.one(
            f"SELECT {column} AS taken FROM {table} WHERE {column} IN ({inside}){elsewhere} "
            "LIMIT 1",
            {**params, "store": self.store_id},
        )
        if taken is not None:
            record = next(
                (r for r in batch if taken.taken in (r.id, getattr(r, "memory_id", None))),
                batch[0],
            )
            raise Conflict(
                f"{where(record)}id {taken.taken} already exists in this database; import "
                "without --keep-ids to give the copy new ids"
            )


def _insert_store(tx: Tx, store_id: str, record: StoreRecord, name: str | None) -> None:
    tx.run(
        "INSERT INTO memory_stores (id, name, description, metadata, created_at, updated_at, "
        "archived_at, memory_count, revision, kind, owner, on_full, secrets, pruned_before, "
        "max_memories, max_content_bytes) VALUES (:id, :name, :description, :metadata, "
        ":created_at, :updated_at, :archived_at, 0, 0, :kind, :owner, :on_full, :secrets, "
        ":pruned_before, :max_memories, :max_content_bytes)",
        {
            "id": store_id,
            "name": record.name if name is None else name,
            "description": record.description,
            "metadata": json.dumps(record.metadata),
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "archived_at": record.archived_at,
            "kind": record.kind,
            "owner": record.owner,
            "on_full": record.on_full,
            "secrets": record.secrets,
            "pruned_before": record.pruned_before,
            "max_memories": record.max_memories,
            "max_content_bytes": record.max_content_bytes,
        },
    )


def _pages(
    tx: Tx, select: str, key: str, column: str, store_id: str, start: object
) -> Iterator[Any]:
    """Every row of ``select`` (which has a WHERE), PAGE at a time in ``key`` order (the
    row's ``column`` holds the key)."""
    after = start
    while True:
        rows = tx.all(
            f"{select} AND {key} > :after ORDER BY {key} LIMIT {PAGE}",
            {"store": store_id, "after": after},
        )
        yield from rows
        if len(rows) < PAGE:
            return
        after = getattr(rows[-1], column)


def _version_record(v: Any, operation: str | None = None) -> VersionRecord:
    return VersionRecord(
        id=v.id,
        memory_id=v.memory_id,
        operation=operation or v.operation,  # type: ignore[arg-type]
        path=v.path,
        content=v.content,
        content_sha256=v.content_sha256,
        size_bytes=v.size_bytes,
        created_at=v.created_at,
        actor=v.actor,
        redacted_at=v.redacted_at,
        redacted_by=v.redacted_by,
        folded_id=None if operation else v.folded_id,
    )
