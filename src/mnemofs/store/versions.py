"""Versions: list, read, redact, prune; stored credentials; scrubbing what was erased."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from mnemofs import limits
from mnemofs.errors import (
    Conflict,
    InvalidRequest,
)
from mnemofs.models import (
    OPERATIONS,
    MemoryId,
    MemoryVersion,
    Page,
    SecretFinding,
    StoreId,
    VersionId,
    View,
)
from mnemofs.secrets import find_secrets
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import (
    _VERSION_COLS,
    SEQ_END,
    _decode_cursor,
    _encode_cursor,
    _timestamp,
    _validate_limit,
    _validate_time,
    _version,
    store_seq_range,
    utc_now,
)
from mnemofs.store.texts import (
    _VERSION_CONTENT,
    CONTENT_TABLES,
    _purge_search_index,
    _sweep_contents,
)
from mnemofs.store.tx import Tx


class VersionsMixin(ServiceBase):
    """Versions: list, read, redact, prune; stored credentials; scrubbing what was erased."""

    def list_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        session_id: str | None = None,
        api_key_id: str | None = None,
        operation: str | None = None,
        created_at_gte: str | datetime | None = None,
        created_at_lte: str | datetime | None = None,
        view: View = "basic",
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        cursor: str | None = None,
    ) -> Page[MemoryVersion]:
        """Versions newest first (with content in the full view), narrowed by each filter
        given: one memory (live or deleted), the session or API key that wrote them, an
        operation ('modified' includes renames), a creation time range."""
        limit = _validate_limit(limit, view)
        full = view == "full"
        if operation is not None and operation not in OPERATIONS:
            raise InvalidRequest(f"operation {operation!r} is not one of {', '.join(OPERATIONS)}")
        if session_id is not None and api_key_id is not None:
            raise InvalidRequest(
                "give session_id or api_key_id, not both: a version has one author"
            )
        filters: dict[str, Any] = {
            "memory": memory_id,
            "actor": session_id if session_id is not None else api_key_id,
            "gte": _validate_time(created_at_gte, "created_at[gte]"),
            "lte": _validate_time(created_at_lte, "created_at[lte]"),
        }
        query = json.dumps(["versions", store_id, operation, filters])
        before = _decode_cursor(query, cursor)
        in_store = store_seq_range(self.db.dialect)
        where = [in_store.where]
        if memory_id is not None:
            where.append("memory_id = :memory")
        if filters["actor"] is not None:
            where.append("actor = :actor")
        if operation == "modified":
            where.append("operation IN ('modified', 'renamed')")
        elif operation is not None:
            where.append("operation = :operation")
        if filters["gte"] is not None:
            where.append("created_at >= :gte")
        if filters["lte"] is not None:
            where.append("created_at <= :lte")
        cols = _VERSION_COLS + (f", {_VERSION_CONTENT}" if full else "")
        sql = f"SELECT {cols}, seq FROM memory_versions WHERE {' AND '.join(where)} "
        sql += f"ORDER BY {in_store.newest_first} LIMIT :limit"
        params = {
            **filters,
            "store": store_id,
            "operation": operation,
            "lo": 0,
            "hi": SEQ_END if before is None else before,
            "limit": limit + 1,
        }

        def run(tx: Tx) -> Page[MemoryVersion]:
            self._store_row(tx, store_id)
            rows = tx.all(sql, params)
            data = [_version(row, row.content if full else None) for row in rows[:limit]]
            more = len(rows) > limit
            return Page(
                data,
                _encode_cursor(query, rows[limit - 1].seq) if more else None,
                lambda c: self.list_versions(
                    store_id,
                    memory_id=memory_id,
                    session_id=session_id,
                    api_key_id=api_key_id,
                    operation=operation,
                    created_at_gte=created_at_gte,
                    created_at_lte=created_at_lte,
                    view=view,
                    limit=limit,
                    cursor=c,
                ),
            )

        return self._read(run)

    def get_version(self, store_id: str, version_id: str) -> MemoryVersion:
        """A version with its content (``None`` once redacted, and for ``deleted``)."""

        def run(tx: Tx) -> MemoryVersion:
            row = self._version_row(tx, store_id, version_id)
            return _version(row, row.content)

        return self._read(run)

    def redact_version(
        self, store_id: str, version_id: str, *, actor: str | None = None
    ) -> MemoryVersion:
        """Clear a version's content and hash, keeping who, what and when (and who redacted).

        The head of a live memory cannot be redacted: write a new version (or delete the memory)
        first. Redacting a redacted version changes nothing. Archived stores allow it: scrubbing
        a leaked secret must stay possible.
        """

        def run(tx: Tx) -> MemoryVersion:
            self._store_row(tx, store_id, lock=True)
            row = self._version_row(tx, store_id, version_id)
            head_of = tx.scalar(
                "SELECT path FROM memories WHERE id = :memory AND head_version_id = :version",
                {"memory": row.memory_id, "version": version_id},
            )
            if head_of is not None:
                raise Conflict(
                    f"version {version_id} is the current head of live memory {row.memory_id} "
                    f"at {head_of!r}: write a new version or delete the memory first"
                )
            if row.redacted_at is None:
                tx.run(
                    "UPDATE memory_versions SET content_sha256 = NULL, "
                    "redacted_at = :now, redacted_by = :actor WHERE id = :id",
                    {"now": utc_now(), "actor": actor or self.actor, "id": version_id},
                )
                _sweep_contents(tx, store_id)  # the text, unless another version has it
                _purge_search_index(tx)  # the text was indexed while it was a head
                erased.append(True)
            return _version(self._version_row(tx, store_id, version_id))

        erased: list[bool] = []
        version = self._write(run)
        if erased:
            self._clear_wal()
        return version

    def prune_versions(
        self,
        store_id: str,
        *,
        older_than_days: float = limits.DEFAULT_RETENTION_DAYS,
        keep_last: int = limits.DEFAULT_KEEP_VERSIONS,
    ) -> int:
        """Remove versions older than ``older_than_days``, except the newest ``keep_last``
        versions of each live memory. Returns how many were removed."""
        if not isinstance(older_than_days, int | float) or older_than_days < 0:
            raise InvalidRequest(f"older_than_days must be >= 0, got {older_than_days!r}")
        if not isinstance(keep_last, int) or keep_last < 1:
            raise InvalidRequest(
                f"keep_last must be >= 1 (a live memory's head is never pruned), got {keep_last!r}"
            )
        cutoff = _timestamp(datetime.now(UTC) - timedelta(days=older_than_days))

        def run(tx: Tx) -> int:
            self._lock_store(tx, store_id)
            removed = tx.count(
                "DELETE FROM memory_versions WHERE store_id = :store AND created_at < :cutoff "
                "AND seq NOT IN (SELECT seq FROM (SELECT v.seq, ROW_NUMBER() OVER "
                "(PARTITION BY v.memory_id ORDER BY v.seq DESC) AS rank "
                "FROM memory_versions v JOIN memories m ON m.id = v.memory_id "
                "WHERE v.store_id = :store) AS ranked WHERE rank <= :keep)",
                {"store": store_id, "cutoff": cutoff, "keep": keep_last},
            )
            if removed:
                _sweep_contents(tx, store_id)
                _purge_search_index(tx)
                tx.run(
                    "UPDATE memory_stores SET pruned_before = :cutoff WHERE id = :store "
                    "AND (pruned_before IS NULL OR pruned_before < :cutoff)",
                    {"store": store_id, "cutoff": cutoff},
                )
            return removed

        removed = self._write(run)
        if removed:
            self._clear_wal()
        return removed

    def scan_secrets(self, store_id: str | None = None) -> list[SecretFinding]:
        """Every credential already stored (all stores, or one), in every version that still
        has content, oldest first; what a store with ``secrets='refuse'`` would refuse now."""
        if store_id is not None:
            self._read(lambda tx: self._store_row(tx, store_id))  # NotFound for a wrong id
        sql = (
            f"SELECT seq, id, store_id, memory_id, path, {_VERSION_CONTENT} FROM memory_versions "
            "WHERE content_sha256 IS NOT NULL AND seq > :after"
            + (" AND store_id = :store" if store_id is not None else "")
            + " ORDER BY seq LIMIT 500"
        )
        found: list[SecretFinding] = []
        after = 0
        while True:

            def batch(tx: Tx, after: int = after) -> list[Any]:
                return tx.all(sql, {"after": after, "store": store_id})

            rows = self._read(batch)
            if not rows:
                return found
            for r in rows:
                found += [
                    SecretFinding(
                        StoreId(r.store_id),
                        MemoryId(r.memory_id),
                        VersionId(r.id),
                        r.path,
                        f.line,
                        f.kind,
                    )
                    for f in find_secrets(r.content)
                ]
            after = rows[-1].seq

    def scrub(self) -> None:
        """Make every erased byte unreachable in the database's own files: on SQLite, merge the
        search index, VACUUM and empty the WAL; on PostgreSQL, VACUUM FULL the tables that hold
        content (dead tuples stay in table files until then) and CHECKPOINT. Texts nothing names
        any more (what folds leave) go first."""

        def sweep(tx: Tx) -> None:
            if tx.dialect == "postgresql":
                # Every store locked, as each change locks its own: a save that names a text
                # nothing else names (its INSERT ... ON CONFLICT took no lock) cannot race this.
                tx.all("SELECT id FROM memory_stores ORDER BY id FOR UPDATE")
            _sweep_contents(tx, None)
            _purge_search_index(tx)

        self._write(sweep)
        self.db.vacuum(CONTENT_TABLES)
        self._clear_wal()
