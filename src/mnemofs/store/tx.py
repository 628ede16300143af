"""A transaction's statements as the service writes them: ``Tx``, over a driver's cursor.

``Database`` (store/sql.py) opens the transactions; a PostgreSQL write is ``PipelineTx``
(store/pgpipe.py), the same methods on libpq's pipeline. Statements are plain SQL with
``:name`` parameters; rows have attribute access.
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class GuardFailed(Exception):
    """What a write assumed no longer holds (``Tx.guard``): the transaction is rolled back;
    the caller does the change again the careful way, which finds out what changed."""


class Statements:
    """What a transaction needs of its database: the dialect, each statement in the driver's
    parameter style, and a maker of rows for each statement's columns; each made once per
    statement text."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self._sql: dict[str, str] = {}
        self._rows: dict[str, Callable[[Any], Any]] = {}

    def sql(self, text: str) -> str:
        """``text`` in the driver's parameter style, cached."""
        try:
            return self._sql[text]
        except KeyError:
            pass
        converted = text
        if self.dialect == "postgresql":
            converted = _PARAM.sub(r"%(\1)s", text.replace("%", "%%"))
        else:
            converted = text.replace(" FOR UPDATE", "")
        self._sql[text] = converted
        return converted

    def row_type(self, sql: str, cursor: Any) -> Callable[[Any], Any]:
        """Rows of ``sql`` with attribute access, made from ``cursor``'s description once (the
        driver builds a description anew each time it is asked)."""
        try:
            return self._rows[sql]
        except KeyError:
            return self.row_maker(sql, [d[0] for d in cursor.description])

    def row_maker(self, sql: str, names: list[str]) -> Callable[[Any], Any]:
        """Rows of ``sql`` with attribute access, for these column names (cached by ``sql``)."""
        try:
            return self._rows[sql]
        except KeyError:
            pass
        row_class: Any = namedtuple("Row", names)  # type: ignore[misc]
        make: Callable[[Any], Any] = row_class._make
        self._rows[sql] = make
        return make


class Tx:
    """One open transaction: run statements, get rows with attribute access. On a driver's
    cursor (SQLite; PostgreSQL reads); a PostgreSQL write is ``pgpipe.PipelineTx``, whose
    statements wait in a pipeline until one needs an answer."""

    __slots__ = ("_cursor", "_db", "told")

    def __init__(self, db: Statements, cursor: Any) -> None:
        self._db = db
        self._cursor = cursor
        self.told: set[str] = set()  # the stores whose revision this transaction moved

    @property
    def dialect(self) -> str:
        return self._db.dialect

    def run(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Execute a statement whose result nobody reads. In a PostgreSQL write transaction
        it goes out with the next one that needs an answer: a save's inserts and its COMMIT
        share one round trip. Its errors surface there too, before the commit."""
        self._cursor.execute(self._db.sql(sql), params or {})

    def run_together(self, statements: Sequence[str], params: Mapping[str, Any]) -> None:
        """``run`` writes that need no answer and no order among them, with one set of
        parameters. On PostgreSQL as one statement, each but the last a writable CTE: the
        server's work per statement (~15 µs) was a fifth of a save. SQLite runs them in turn
        (it has no writable CTEs, and a statement there costs little)."""
        if self.dialect == "postgresql" and len(statements) > 1:
            ctes = ", ".join(f"w{n} AS ({sql})" for n, sql in enumerate(statements[:-1]))
            self.run(f"WITH {ctes} {statements[-1]}", params)
        else:
            for sql in statements:
                self.run(sql, params)

    def tell(self, store_id: str) -> None:
        """Note that this transaction moved the store's revision: on PostgreSQL listening
        mounts are told once it has committed (store/notices.py; SQLite's mounts watch its
        files), and a write's report names it (``ServiceBase.take_moved``)."""
        self.told.add(store_id)

    def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        """Execute; return the number of rows changed (waits for the answer)."""
        self._cursor.execute(self._db.sql(sql), params or {})
        return int(self._cursor.rowcount)

    def many(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Execute once per row of parameters; return the number of rows changed in all."""
        if not rows:
            return 0
        self._cursor.executemany(self._db.sql(sql), rows)
        return int(self._cursor.rowcount)

    def guard(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement that answers ``1 / count(*)`` of what a change assumes: it fails
        (PostgreSQL: division by zero) or answers NULL (SQLite) when the count is 0, and the
        transaction ends in ``GuardFailed``. In a PostgreSQL write transaction it goes out with
        the next statement that needs an answer, so a change can assume what it would have
        asked for and send its writes in the same round trip."""
        if self.scalar(sql, params) is None:
            raise GuardFailed(sql)

    def ahead(self, sql: str, params: Mapping[str, Any] | None = None) -> Callable[[], list[Any]]:
        """Send a query now, read its rows later (call the result). In a PostgreSQL write
        transaction it goes out with the next statement that waits for an answer and runs after
        the ones sent before it: a lock and the lookup behind it share one round trip.
        Elsewhere it runs at once."""
        now = self.all(sql, params)
        return lambda: now

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        cur = self._cursor
        cur.execute(self._db.sql(sql), params or {})
        rows = cur.fetchall()
        make = self._db.row_type(sql, cur)
        return [make(row) for row in rows]

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        """The first row, or None."""
        cur = self._cursor
        cur.execute(self._db.sql(sql), params or {})
        row = cur.fetchone()
        return None if row is None else self._db.row_type(sql, cur)(row)

    def scalar(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        cur = self._cursor
        cur.execute(self._db.sql(sql), params or {})
        row = cur.fetchone()
        return None if row is None else row[0]
