"""A whole workspace from one database into another (``mnemofs db copy``, issue 18).

The case that matters: a workspace outgrows one host and moves from the embedded SQLite file
to PostgreSQL. Every table is copied row for row, ids, sequence numbers and hashes included,
so sessions, tokens and keys keep working against the new database.

- **One snapshot of the source**: everything is read in one read transaction, so a copy is
  of one moment even while mounts keep saving (what they save after it is not copied: stop
  them, or copy again — see below).
- **Resumable**: rows go into the target a page at a time, each page its own transaction,
  with ``ON CONFLICT DO NOTHING``; a copy that was interrupted is finished by running it
  again, and nothing is duplicated. A target holding a store or session the source does not
  have is refused: this fills an empty database or finishes a copy of the same one.
- **Verified**: at the end, every table's row count, and a digest of every version's and
  memory's id and hash, must match between source snapshot and target; then the target's
  ``db check`` runs. Any difference is an error naming the table.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mnemofs.errors import Conflict, InvalidRequest
from mnemofs.store.schema import metadata
from mnemofs.store.service import MemoryService
from mnemofs.store.sql import Database
from mnemofs.store.tx import Tx

PAGE = 500
# Parents before children (foreign keys).
TABLES = (
    "capacity_pools",
    "memory_stores",
    "contents",
    "directories",
    "memories",
    "memory_versions",
    "sessions",
    "session_attachments",
    "api_keys",
    "session_tokens",
)
# Kept by the target's own triggers as the rows arrive (0017): copied, they would count twice.
_COUNTED = {"memory_stores": {"directory_count"}}
# What the digests cover: enough to show that every version and memory arrived intact.
_DIGESTS = {
    "memory_versions": "id, memory_id, operation, path, content_sha256, redacted_at",
    "memories": "id, path, content_sha256, head_version_id",
}


@dataclass
class CopyReport:
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows in the source
    copied: dict[str, int] = field(default_factory=dict)  # table -> rows new in the target


def copy_workspace(
    source: MemoryService,
    target: MemoryService,
    progress: Callable[[str, int, int], None] | None = None,
) -> CopyReport:
    """Copy every row of ``source``'s database into ``target``'s (both at this schema), then
    verify; ``progress(table, rows done, rows in all)`` hears about each page."""
    if source.db.engine.url == target.db.engine.url:
        raise InvalidRequest("the source and the target are the same database")
    report = copy_database(source.db, target.db, progress)
    target.catch_up_search()  # SQLite: the search index takes in the copied memories
    problems = target.check().problems
    if problems:
        raise Conflict(f"the copy fails db check: {'; '.join(problems[:3])}")
    return report


def copy_database(
    source: Database, target: Database, progress: Callable[[str, int, int], None] | None = None
) -> CopyReport:
    """See ``copy_workspace``."""
    report = CopyReport()

    def run(src: Tx) -> None:
        _refuse_foreign_rows(src, target)
        for table in TABLES:
            counted = _COUNTED.get(table, set())
            columns = [c.name for c in metadata.tables[table].columns if c.name not in counted]
            keys = [c.name for c in metadata.tables[table].primary_key.columns]
            report.rows[table] = _count(src, table)
            report.copied[table] = 0
            done = 0
            for rows in _pages(src, table, columns, keys):
                report.copied[table] += target.run(
                    functools.partial(_insert, table=table, columns=columns, rows=rows),
                    write=True,
                )
                done += len(rows)
                if progress is not None:
                    progress(table, done, report.rows[table])
        if target.dialect == "postgresql":  # explicit seqs do not move the sequence
            target.run(
                lambda tx: tx.scalar(
                    "SELECT setval(pg_get_serial_sequence('memory_versions', 'seq'), "
                    "COALESCE((SELECT MAX(seq) FROM memory_versions), 0) + 1, false)"
                ),
                write=True,
            )
        _verify(src, target, report)

    source.run(run, write=False, once=True, snapshot=True)
    return report


def _refuse_foreign_rows(src: Tx, target: Database) -> None:
    for table in ("memory_stores", "sessions"):
        theirs: list[str] = target.run(functools.partial(_ids, table=table), write=False)
        for chunk in range(0, len(theirs), PAGE):
            ids = theirs[chunk : chunk + PAGE]
            params = {f"i{n}": v for n, v in enumerate(ids)}
            inside = ", ".join(f":i{n}" for n in range(len(ids)))
            found = {
                r.id for r in src.all(f"SELECT id FROM {table} WHERE id IN ({inside})", params)
            }
            missing = [i for i in ids if i not in found]
            if missing:
                raise InvalidRequest(
                    f"the target already holds {table} row {missing[0]}, which the source does "
                    "not have: db copy fills an empty database or finishes an earlier copy of "
                    "the same one"
                )


def _ids(tx: Tx, table: str) -> list[str]:
    return [r.id for r in tx.all(f"SELECT id FROM {table}")]


def _pages(src: Tx, table: str, columns: list[str], keys: list[str]) -> Any:
    """The table's rows, PAGE at a time in key order (keyset pagination on the key)."""
    cols = ", ".join(columns)
    order = ", ".join(keys)
    after: tuple[Any, ...] | None = None
    while True:
        where = ""
        params: dict[str, Any] = {}
        if after is not None:
            where = f"WHERE ({order}) > ({', '.join(f':k{n}' for n in range(len(keys)))})"
            params = {f"k{n}": v for n, v in enumerate(after)}
        rows = src.all(f"SELECT {cols} FROM {table} {where} ORDER BY {order} LIMIT {PAGE}", params)
        if rows:
            yield rows
        if len(rows) < PAGE:
            return
        after = tuple(getattr(rows[-1], k) for k in keys)


def _insert(tx: Tx, *, table: str, columns: list[str], rows: list[Any]) -> int:
    cols = ", ".join(columns)
    values = ", ".join(f":{c}" for c in columns)
    return tx.many(
        f"INSERT INTO {table} ({cols}) VALUES ({values}) ON CONFLICT DO NOTHING",
        [r._asdict() for r in rows],
    )


def _digest(tx: Tx, table: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = 0
    key = "seq" if table == "memory_versions" else "id"
    columns = _DIGESTS[table].split(", ")
    for rows in _pages(tx, table, [*columns, key] if key not in columns else columns, [key]):
        for row in rows:
            digest.update(repr(tuple(row)).encode())
            count += 1
    return count, digest.hexdigest()


def _count(tx: Tx, table: str) -> int:
    return int(tx.scalar(f"SELECT COUNT(*) FROM {table}"))


def _verify(src: Tx, target: Database, report: CopyReport) -> None:
    for table in TABLES:
        theirs = target.run(functools.partial(_count, table=table), write=False)
        if theirs != report.rows[table]:
            raise Conflict(
                f"{table}: the source has {report.rows[table]} rows, the target {theirs}: the "
                "target changed during the copy, or the source since an earlier one"
            )
    for table in _DIGESTS:
        mine = _digest(src, table)
        copied = target.run(functools.partial(_digest, table=table), write=False)
        if mine != copied:
            raise Conflict(f"{table}: the target's rows differ from the source's")
