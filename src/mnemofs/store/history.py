"""What was ever at a path: the store side of the mount's ``.history`` (issue 19).

A memory's history is found at its last path: a live memory's path, or for a deleted one the
path its ``deleted`` version records (migration 0010 indexes exactly those rows). A path may
hold several memories' histories (one deleted, then another created there), shown together in
commit order.
"""

from __future__ import annotations

from typing import Any

from mnemofs.models import HistoryEntry, MemoryId, PathHistory, VersionId
from mnemofs.paths import ROOT, prefix_upper_bound, validate_path
from mnemofs.store.base import ServiceBase
from mnemofs.store.tx import Tx

# The last path of every memory under a prefix: live ones, and deleted ones that are gone.
_LAST_PATHS = (
    "SELECT path FROM memories WHERE store_id = :store AND path >= :lo AND path < :hi "
    "UNION SELECT v.path FROM memory_versions v WHERE v.store_id = :store "
    "AND v.operation = 'deleted' AND v.path >= :lo AND v.path < :hi "
    "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id)"
)


class HistoryMixin(ServiceBase):
    """Versions by path, for ``.history``."""

    def path_history(self, store_id: str, path: str) -> PathHistory:
        """The versions of every memory whose last path is ``path`` ("/" for none: the store's
        top), oldest first, and the names directly below ``path`` that have history."""
        if path != ROOT:
            path = validate_path(path)

        def run(tx: Tx) -> PathHistory:
            self._store_row(tx, store_id)
            versions: list[Any] = []
            if path != ROOT:
                versions = tx.all(
                    "SELECT id, memory_id, operation, created_at, size_bytes, redacted_at "
                    "FROM memory_versions WHERE store_id = :store AND memory_id IN ("
                    "SELECT id FROM memories WHERE store_id = :store AND path = :path "
                    "UNION SELECT v.memory_id FROM memory_versions v WHERE v.store_id = :store "
                    "AND v.operation = 'deleted' AND v.path = :path AND NOT EXISTS "
                    "(SELECT 1 FROM memories m WHERE m.id = v.memory_id)) ORDER BY seq",
                    {"store": store_id, "path": path},
                )
            lo = path.rstrip("/") + "/"
            names = {
                row.path[len(lo) :].split("/", 1)[0]
                for row in tx.all(
                    _LAST_PATHS, {"store": store_id, "lo": lo, "hi": prefix_upper_bound(lo)}
                )
            }
            return PathHistory(
                versions=tuple(
                    HistoryEntry(
                        version_id=VersionId(v.id),
                        memory_id=MemoryId(v.memory_id),
                        operation=v.operation,
                        created_at=v.created_at,
                        size_bytes=v.size_bytes,
                        redacted=v.redacted_at is not None,
                    )
                    for v in versions
                ),
                names=tuple(sorted(names)),
            )

        return self._read(run)
