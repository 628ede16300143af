"""PostgreSQL write transactions sent on libpq's pipeline directly (issue 17).

psycopg's pipeline mode does a round of work after every statement it is given: it flushes the
socket, polls it and looks for results (``cursor.execute`` inside ``Connection.pipeline()``):
seven statements of a save, ~300 µs of client CPU in one process, measured, of which the two
waits for the server are the only part that needs the network. Here a write transaction's
statements are queued in libpq's own buffer and the socket is flushed and read once per round
trip: the same seven statements in ~100 µs. The round trips stay as they were (``Tx.ahead``):
a change is the lock with its lookups, then the writes with the ``COMMIT``.

A transaction whose statements all go in one round trip sends neither ``BEGIN`` nor
``COMMIT``: the statements a pipeline sends before its sync are one implicit transaction, which
the server commits at the sync (or rolls back whole at an error), so the two statements' own
work (~20 µs of a save's ~250) was for nothing. Statements are therefore queued here, not in
libpq, until a round trip: the first that is not the last begins the transaction first.

Statements are prepared once per connection (named ``mnemofs_N``, at most ``MAX_PREPARED``;
later texts run unnamed). Parameters go as text: ``str`` with no type (the server infers it, as
it does for psycopg's strings), ``int`` as ``int8``, ``bool`` as ``bool``, ``float`` as
``float8``, ``None`` as NULL. Rows come back through psycopg's own loaders, so they hold what
psycopg would give. Errors are psycopg's exceptions with their SQLSTATE, raised at the round
trip that brings them, before the commit; the caller rolls back (``Database._postgres``).

The connection is psycopg's, in autocommit mode, and is left as psycopg expects it: idle or in
a transaction, never in pipeline mode and with nothing unread (``PipelineTx.close``).
"""

from __future__ import annotations

import functools
import re
import select
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from mnemofs.store.engine import NUL_REFUSED
from mnemofs.store.pgwait import Spin
from mnemofs.store.tx import GuardFailed, Statements, Tx

MAX_PREPARED = 512
# invalid_sql_statement_name: a prepared statement the server no longer has. Retried
# (store/sql.py), prepared again.
LOST_STATEMENT = "26000"
DIVISION_BY_ZERO = "22012"  # how a Tx.guard fails
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_INT8, _BOOL, _FLOAT8 = 20, 16, 701
_POLL_MS = 1000  # a blocking wait wakes this often (signals are handled in between)
CANCEL_WAIT_S = 2.0  # how long an interrupted wait waits for the server to take the cancel


@functools.lru_cache(maxsize=2048)
def numbered(sql: str) -> tuple[bytes, tuple[str, ...]]:
    """``sql`` with ``:name`` parameters as ``$1, $2...`` and the names in that order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(number, sql).encode(), tuple(names)


def _as_text(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, str):
        if "\x00" in value:  # libpq would send the text up to it: refused, as psycopg does
            from psycopg import DataError

            raise DataError(NUL_REFUSED)
        return value.encode()
    if isinstance(value, (int, float)):
        return str(value).encode()
    raise TypeError(f"cannot send a {type(value).__name__} as a query parameter")


def _type_of(value: Any) -> int:
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT8
    if isinstance(value, float):
        return _FLOAT8
    return 0  # str and None: the server infers the type from the statement


class _Pending:
    """A statement queued or sent whose results have not been read yet: ``send(*args)``
    hands it to libpq."""

    __slots__ = ("args", "guard", "prepared", "result", "send", "sql")

    def __init__(
        self,
        sql: str,
        send: Callable[..., None],
        args: tuple[Any, ...],
        prepared: bytes | None = None,
    ) -> None:
        self.sql = sql
        self.send, self.args = send, args
        self.prepared = prepared  # the text, if this is the statement's PREPARE
        self.result: Any = None
        self.guard = False  # a Tx.guard: its division by zero is GuardFailed


class PipelineTx(Tx):
    """A write transaction on PostgreSQL (see the module docstring): ``Tx``'s methods, with
    every statement queued until one needs an answer."""

    __slots__ = (
        "_begin",
        "_conn",
        "_failed",
        "_pending",
        "_pg",
        "_poller",
        "_prepared",
        "_spin",
    )

    def __init__(self, db: Statements, conn: Any) -> None:
        super().__init__(db, None)
        self._conn = conn
        self._pg = conn.pgconn
        prepared = getattr(conn, "mnemofs_prepared", None)
        if prepared is None:
            prepared = conn.mnemofs_prepared = {}
        self._prepared: dict[bytes, bytes] = prepared
        self._pending: list[_Pending] = []
        self._begin = False  # owed: sent before the first round trip that is not the last
        self._failed = False
        self._spin: Spin | None = getattr(conn, "spin", None)
        # One poller per connection and socket (a socket changes only with a new connection).
        socket = self._pg.socket
        poller = getattr(conn, "mnemofs_poller", None)
        if poller is None or poller[0] != socket:
            poller = conn.mnemofs_poller = (socket, select.poll())
            poller[1].register(socket, select.POLLIN)
        self._poller = poller[1]
        self._pg.enter_pipeline_mode()

    # -- Tx ---------------------------------------------------------------------------------

    def run(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._send(sql, params)

    def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        sent = self._send(sql, params)
        self._sync()
        return _changed(sent.result)

    def many(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> int:
        sent = [self._send(sql, row) for row in rows]
        if not sent:
            return 0
        self._sync()
        return sum(_changed(each.result) for each in sent)

    def guard(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._send(sql, params).guard = True

    def ahead(self, sql: str, params: Mapping[str, Any] | None = None) -> Callable[[], list[Any]]:
        sent = self._send(sql, params)

        def later() -> list[Any]:
            if sent in self._pending:
                self._sync()
            return self._rows(sent)

        return later

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        sent = self._send(sql, params)
        self._sync()
        return self._rows(sent)

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        sent = self._send(sql, params)
        self._sync()
        result = sent.result
        if result is None or not result.nfields or not result.ntuples:
            return None
        raw = result.get_value(0, 0)
        return None if raw is None else self._loader(result.ftype(0))(raw)

    # -- the transaction --------------------------------------------------------------------

    def begin(self, *, now: bool = False) -> None:
        """Begin the transaction: explicitly only if it takes more than one round trip (see
        the module docstring), or ``now`` (for a ``SET LOCAL``, which wants a block)."""
        if now:
            self._send("BEGIN", None)
        else:
            self._begin = True

    def commit(self) -> None:
        if not self._begin:  # begun: committed so; else the sync commits it
            self._send("COMMIT", None)
        self._begin = False
        self._sync()

    def close(self) -> None:
        """Leave pipeline mode and roll back what did not commit (after an error too). What is
        still queued was never sent (a round trip reads every answer it brings): it goes. The
        rollback is ours: psycopg's own forgets its prepared statements with a ``DEALLOCATE
        ALL``, which would take ours with them."""
        from psycopg import pq

        pg = self._pg
        for each in self._pending:  # never prepared after all
            if each.prepared is not None:
                self._prepared.pop(each.prepared, None)
        self._pending = []
        # A broken connection cannot do either: the caller's rollback then discards it.
        with suppress(Exception):
            if pg.pipeline_status:
                pg.exit_pipeline_mode()
            if pg.transaction_status in (
                pq.TransactionStatus.INTRANS,
                pq.TransactionStatus.INERROR,
            ):
                pg.send_query(b"ROLLBACK")
                self._flush()
                while self._next() is not None:
                    pass

    # -- sending and reading ----------------------------------------------------------------

    def _send(self, sql: str, params: Mapping[str, Any] | None) -> _Pending:
        if self._failed:
            raise RuntimeError("a statement failed in this transaction; it must roll back")
        text, names = numbered(sql)
        given = params or {}
        values = [given[name] for name in names]
        pg, pending = self._pg, self._pending
        name = self._prepared.get(text)
        if name is None and len(self._prepared) < MAX_PREPARED:
            number = self._conn.mnemofs_named = getattr(self._conn, "mnemofs_named", 0) + 1
            name = b"mnemofs_%d" % number
            self._prepared[text] = name  # now: the same text may follow in this pipeline
            types = [_type_of(value) for value in values]
            pending.append(_Pending(sql, pg.send_prepare, (name, text, types), prepared=text))
        encoded = [_as_text(value) for value in values]
        if name is None:
            types = [_type_of(value) for value in values]
            sent = _Pending(sql, pg.send_query_params, (text, encoded, types))
        else:
            sent = _Pending(sql, pg.send_query_prepared, (name, encoded))
        pending.append(sent)
        return sent

    def _sync(self) -> None:
        """Send everything queued with a sync, and read every result up to it; raise the
        first error."""
        from psycopg import errors, pq

        pg = self._pg
        if self._begin:  # a round trip before the last: the transaction begins first
            self._begin = False
            queued, self._pending = self._pending, []
            self._send("BEGIN", None)
            self._pending += queued
        pending, self._pending = self._pending, []
        for each in pending:
            each.send(*each.args)
        pg.pipeline_sync()
        self._flush()
        error: Exception | None = None
        for sent in pending:
            results = []
            while (result := self._next()) is not None:
                results.append(result)
            result = sent.result = results[-1] if results else None
            status = None if result is None else result.status
            if result is not None and status == pq.ExecStatus.FATAL_ERROR and error is None:
                error = errors.error_from_result(result, encoding=pg._encoding)
                if sent.guard and error.sqlstate == DIVISION_BY_ZERO:
                    error = GuardFailed(sent.sql)
            made = status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
            if not made and sent.prepared is not None:  # never made: forget the name
                self._prepared.pop(sent.prepared, None)
        last = self._next()
        if last is None or last.status != pq.ExecStatus.PIPELINE_SYNC:
            error = error or errors.InternalError("the pipeline's results did not end in a sync")
        if error is not None:
            self._failed = True
            if getattr(error, "sqlstate", None) == LOST_STATEMENT:
                self._prepared.clear()  # gone on the server (a DEALLOCATE ALL): prepare anew
            raise error

    def _next(self) -> Any:
        pg = self._pg
        while pg.is_busy():
            self._wait()
            pg.consume_input()
        return pg.get_result()

    def _wait(self) -> None:
        """Until the socket has something to read: spin first (a mount's request thread within
        a stream of saves, store/pgwait.py), then sleep in ``poll``. Interrupted (Ctrl-C), the
        server's work is cancelled too, as psycopg's own wait does: a statement waiting for a
        lock would wait on after its client has gone, holding what it has locked."""
        poll = self._poller.poll
        spin = self._spin
        clock = time.perf_counter
        try:
            if spin is not None:
                end = spin.until(clock())
                while clock() < end:
                    if poll(0):
                        spin.answered(clock())
                        return
            while not poll(_POLL_MS):
                pass
            if spin is not None:
                spin.answered(clock())
        except KeyboardInterrupt:
            with suppress(Exception):
                self._conn.cancel_safe(timeout=CANCEL_WAIT_S)
            raise

    def _flush(self) -> None:
        """Send the queued statements; while the socket is full, read what the server sends
        back meanwhile (it may be waiting for us to read before it reads on)."""
        pg = self._pg
        if not pg.flush():
            return
        both = select.poll()
        both.register(pg.socket, select.POLLIN | select.POLLOUT)
        while pg.flush():
            for _, events in both.poll(_POLL_MS):
                if events & select.POLLIN:
                    pg.consume_input()

    def _rows(self, sent: _Pending) -> list[Any]:
        result = sent.result
        if result is None or not result.nfields:
            return []
        columns = range(result.nfields)
        loaders = [self._loader(result.ftype(i)) for i in columns]
        make = self._db.row_maker(sent.sql, [result.fname(i).decode() for i in columns])
        value = result.get_value
        return [
            make(
                [
                    None if (raw := value(row, column)) is None else load(raw)
                    for column, load in enumerate(loaders)
                ]
            )
            for row in range(result.ntuples)
        ]

    def _loader(self, oid: int) -> Callable[[bytes], Any]:
        loaders = getattr(self._conn, "mnemofs_loaders", None)
        if loaders is None:
            loaders = self._conn.mnemofs_loaders = {}
        load = loaders.get(oid)
        if load is None:
            from psycopg import pq

            kind = self._conn.adapters.get_loader(oid, pq.Format.TEXT)
            if kind is None:  # a type with no loader of its own: psycopg gives its text
                load = loaders[oid] = bytes.decode
            else:
                load = loaders[oid] = kind(oid, self._conn).load
        return load


def _changed(result: Any) -> int:
    if result is None:
        return 0
    if result.nfields:
        return int(result.ntuples)
    return int(result.command_tuples or 0)
