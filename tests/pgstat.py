"""What a PostgreSQL server counts, for tests that assert how much work something did (rows
read, transactions, connections) rather than how long it took."""

from __future__ import annotations

from typing import Any

import psycopg


def watching(db_url: str) -> Any:
    """A connection of the test's own to the database at ``db_url`` (a SQLAlchemy URL), in
    autocommit mode: each count is read afresh."""
    return psycopg.connect(db_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)


def number(conn: Any, sql: str) -> int:
    """The one integer ``sql`` answers, on a psycopg connection."""
    row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def rows_read(conn: Any, table: str) -> int:
    """Rows of ``table`` read so far by scans and index lookups, with the counts of ``conn``'s
    own backend made visible first (a backend sends its counts at most once a second)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    return number(
        conn,
        "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables "
        f"WHERE relname = '{table}'",
    )
