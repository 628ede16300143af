"""The consistency check behind ``mnemofs db check``: is the database what the rules promise?

After a crash, a power cut or a hand edit, an admin wants one answer: is every store exactly as
its committed history says? This module checks, read-only, in one transaction:

- the database engine's own view (SQLite ``integrity_check`` and ``foreign_key_check``);
- every store's ``memory_count`` and ``directory_count`` against its rows;
- every live memory's head: it exists, belongs to it, is its newest version, is not a
  deletion, and carries the memory's path and content;
- every stored hash against its content (memories and versions), and every size;
- no memory whose newest version is not a deletion has gone missing;
- no path is both a memory and a directory.

A problem is one line naming what is wrong and where; an empty list means clean.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mnemofs.store.texts import _content_of
from mnemofs.store.tx import Tx

_BATCH = 500


@dataclass
class CheckReport:
    stores: int = 0
    memories: int = 0
    versions: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(tx: Tx, store_id: str | None = None) -> CheckReport:
    """Check the whole database, or one store (``store_id``)."""
    report = CheckReport()
    problems = report.problems
    scope = {"store": store_id}

    if tx.dialect == "sqlite" and store_id is None:
        rows = [r[0] for r in tx.all("PRAGMA integrity_check")]
        if rows != ["ok"]:
            problems.extend(f"sqlite integrity_check: {r}" for r in rows)
        for r in tx.all("PRAGMA foreign_key_check"):
            problems.append(f"sqlite foreign_key_check: row {r[1]} of {r[0]} points nowhere")
        try:  # the search index against the memories it indexes (VACUUM can renumber rows)
            tx.run("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
        except Exception as exc:
            problems.append(
                f"search index out of step with memories ({exc}): rebuild it with sqlite3 "
                "DB \"INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')\""
            )

    store_where = "" if store_id is None else " WHERE s.id = :store"
    for row in tx.all(
        "SELECT s.id, s.memory_count, COUNT(m.id) AS actual FROM memory_stores s "
        f"LEFT JOIN memories m ON m.store_id = s.id{store_where} "
        "GROUP BY s.id, s.memory_count",
        scope,
    ):
        report.stores += 1
        if row.memory_count != row.actual:
            problems.append(
                f"store {row.id}: memory_count is {row.memory_count} but it holds "
                f"{row.actual} memories"
            )

    for row in tx.all(
        "SELECT s.id, s.directory_count, COUNT(d.path) AS actual FROM memory_stores s "
        f"LEFT JOIN directories d ON d.store_id = s.id{store_where} "
        "GROUP BY s.id, s.directory_count",
        scope,
    ):
        if row.directory_count != row.actual:
            problems.append(
                f"store {row.id}: directory_count is {row.directory_count} but it keeps "
                f"{row.actual} directories"
            )

    for row in tx.all(
        "SELECT m.id, m.path, m.head_version_id, v.memory_id AS v_memory, v.path AS v_path, "
        "v.operation, v.content_sha256 AS v_sha, m.content_sha256 AS m_sha, "
        "(SELECT w.id FROM memory_versions w WHERE w.memory_id = m.id "
        " ORDER BY w.seq DESC LIMIT 1) AS newest "
        "FROM memories m LEFT JOIN memory_versions v ON v.id = m.head_version_id"
        + ("" if store_id is None else " WHERE m.store_id = :store"),
        scope,
    ):
        what = f"memory {row.id} at {row.path!r}"
        if row.v_memory is None:
            problems.append(f"{what}: head version {row.head_version_id} does not exist")
            continue
        if row.v_memory != row.id:
            problems.append(f"{what}: head version {row.head_version_id} is another memory's")
        if row.newest != row.head_version_id:
            problems.append(f"{what}: head is {row.head_version_id} but newest is {row.newest}")
        if row.operation == "deleted":
            problems.append(f"{what}: head version {row.head_version_id} is a deletion")
        if row.v_path != row.path:
            problems.append(f"{what}: head version says path {row.v_path!r}")
        if row.v_sha != row.m_sha:
            problems.append(f"{what}: head version's content differs from the memory's")

    for row in tx.all(
        "SELECT v.memory_id, v.path, v.operation FROM memory_versions v "
        "WHERE v.seq = (SELECT MAX(w.seq) FROM memory_versions w WHERE w.memory_id = v.memory_id) "
        "AND v.operation <> 'deleted' AND NOT EXISTS "
        "(SELECT 1 FROM memories m WHERE m.id = v.memory_id)"
        + ("" if store_id is None else " AND v.store_id = :store"),
        scope,
    ):
        problems.append(
            f"memory {row.memory_id} at {row.path!r}: its newest version is {row.operation!r}, "
            "not a deletion, but the memory is gone"
        )

    for row in tx.all(
        "SELECT a.store_id, a.path, b.path AS under FROM memories a JOIN memories b "
        "ON b.store_id = a.store_id AND b.path > a.path || '/' AND b.path < a.path || '0'"
        + ("" if store_id is None else " WHERE a.store_id = :store"),
        scope,
    ):
        problems.append(
            f"store {row.store_id}: {row.path!r} is a memory and also holds {row.under!r}"
        )
    for row in tx.all(
        "SELECT d.store_id, d.path FROM directories d JOIN memories m "
        "ON m.store_id = d.store_id AND m.path || '/' = d.path"
        + ("" if store_id is None else " WHERE d.store_id = :store"),
        scope,
    ):
        problems.append(f"store {row.store_id}: {row.path!r} is a directory and a memory")

    # Hashes and sizes, in batches by key (content can be large; never load a table at once).
    # Each row's text is its store's ``contents`` row with its hash (0014): a text that does
    # not hash to its key, or a hash with no text, shows here.
    also = "" if store_id is None else " AND store_id = :store"
    columns = f"id, path, content_sha256, size_bytes, {_content_of('memories')}"
    for row in _batches(tx, columns, "memories", "id", "", also, scope):
        report.memories += 1
        what = f"memory {row.id} at {row.path!r}"
        if row.content is None:
            problems.append(f"{what}: its content ({row.content_sha256}) is not stored")
            continue
        _check_content(problems, what, row.content, row.content_sha256, row.size_bytes)
    columns = (
        "seq, id, path, operation, content_sha256, size_bytes, redacted_at, "
        f"{_content_of('memory_versions')}"
    )
    for row in _batches(tx, columns, "memory_versions", "seq", -1, also, scope):
        report.versions += 1
        what = f"version {row.id} ({row.operation} {row.path!r})"
        if row.content is None:
            if row.content_sha256 is not None:
                problems.append(f"{what}: its content ({row.content_sha256}) is not stored")
            elif row.operation != "deleted" and row.redacted_at is None:
                problems.append(f"{what}: no content, yet neither deleted nor redacted")
            continue
        _check_content(problems, what, row.content, row.content_sha256, row.size_bytes)
    return report


def _batches(
    tx: Tx, columns: str, table: str, key: str, start: object, also: str, scope: dict[str, Any]
) -> Iterator[Any]:
    """Every row of ``table`` (``also``: more conditions), _BATCH at a time in ``key`` order."""
    after = start
    while True:
        rows = tx.all(
            f"SELECT {columns} FROM {table} WHERE {key} > :after{also} "
            f"ORDER BY {key} LIMIT {_BATCH}",
            {"after": after, **scope},
        )
        yield from rows
        if len(rows) < _BATCH:
            return
        after = getattr(rows[-1], key)


def _check_content(
    problems: list[str], what: str, content: str, sha: str | None, size: int
) -> None:
    data = content.encode("utf-8", "surrogatepass")
    if hashlib.sha256(data).hexdigest() != sha:
        problems.append(f"{what}: content does not match its SHA-256")
    if len(data) != size:
        problems.append(f"{what}: size_bytes is {size} but the content has {len(data)} bytes")
