"""Versions: list, read, redact, prune; stored credentials; scrubbing what was erased."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mnemofs import limits
from mnemofs.errors import (
    Conflict,
    InvalidRequest,
)
from mnemofs.models import (
    MemoryId,
    MemoryVersion,
    Page,
    SecretFinding,
    StoreId,
    VersionId,
)
from mnemofs.secrets import find_secrets
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import (
    _VERSION_COLS,
    CONTENT_TABLES,
    _decode_cursor,
    _encode_cursor,
    _purge_search_index,
    _timestamp,
    _validate_limit,
    _version,
    utc_now,
)
from mnemofs.store.sql import Tx


class VersionsMixin(ServiceBase):
    """Versions: list, read, redact, prune; stored credentials; scrubbing what was erased."""

    def list_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        cursor: str | None = None,
    ) -> Page[MemoryVersion]:
        """Versions newest first, without content; optionally of one memory (live or deleted)."""
        limit = _validate_limit(limit)
        before = _decode_cursor("versions", cursor)
        where = "memory_id = :memory AND store_id = :store" if memory_id else "store_id = :store"
        if before is not None:
            where += " AND seq < :before"
        sql = f"SELECT {_VERSION_COLS}, seq FROM memory_versions WHERE {where} "
        sql += "ORDER BY seq DESC LIMIT :limit"

        def run(tx: Tx) -> Page[MemoryVersion]:
            self._store_row(tx, store_id)
            rows = tx.all(
                sql,
                {"store": store_id, "memory": memory_id, "before": before, "limit": limit + 1},
            )
            data = [_version(row) for row in rows[:limit]]
            more = len(rows) > limit
            return Page(
                data,
                _encode_cursor("versions", rows[limit - 1].seq) if more else None,
                lambda c: self.list_versions(store_id, memory_id=memory_id, limit=limit, cursor=c),
            )

        return self._read(run)

    def get_version(self, store_id: str, version_id: str) -> MemoryVersion:
        """A version with its content (``None`` once redacted, and for ``deleted``)."""

        def run(tx: Tx) -> MemoryVersion:
            row = self._version_row(tx, store_id, version_id)
            return _version(row, row.content)

        return self._read(run)

    def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        """Clear a version's content and hash, keeping who, what and when.

        The head of a live memory cannot be redacted: write a new version (or delete the memory)
        first. Redacting a redacted version changes nothing.
        """

        def run(tx: Tx) -> MemoryVersion:
            self._lock_store(tx, store_id)
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
                    "UPDATE memory_versions SET content = NULL, content_sha256 = NULL, "
                    "redacted_at = :now WHERE id = :id",
                    {"now": utc_now(), "id": version_id},
                )
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
            removed = tx.run(
                "DELETE FROM memory_versions WHERE store_id = :store AND created_at < :cutoff "
                "AND seq NOT IN (SELECT seq FROM (SELECT v.seq, ROW_NUMBER() OVER "
                "(PARTITION BY v.memory_id ORDER BY v.seq DESC) AS rank "
                "FROM memory_versions v JOIN memories m ON m.id = v.memory_id "
                "WHERE v.store_id = :store) AS ranked WHERE rank <= :keep)",
                {"store": store_id, "cutoff": cutoff, "keep": keep_last},
            )
            if removed:
                _purge_search_index(tx)
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
            "SELECT seq, id, store_id, memory_id, path, content FROM memory_versions "
            "WHERE content IS NOT NULL AND seq > :after"
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
        content (dead tuples stay in table files until then) and CHECKPOINT."""
        self._write(_purge_search_index)
        self.db.vacuum(CONTENT_TABLES)
        self._clear_wal()
