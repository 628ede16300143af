"""Running the service's SQL: one DBAPI connection per thread, transactions, transient retries.

Why not SQLAlchemy Core statements: building and cache-keying a Core statement costs 60–260 µs
per execution on these machines, against ~4 µs for the same query on the raw driver, and a save
runs five statements. So the schema and the migrations are SQLAlchemy's, while the service's
statements are plain SQL written once, portable between SQLite and PostgreSQL, with ``:name``
parameters (rewritten to ``%(name)s`` for psycopg), run on the driver's own connections.

Concurrency contract: a ``Database`` may be shared by threads; each thread gets its own
connection (opened once and kept), and each ``transaction()`` runs on that connection alone.
Nothing else is shared but the "unreachable" state below.

When the server goes away (PostgreSQL restarted, network gone): a broken connection is replaced
at once and the transaction run again on the new one, unless it broke while committing — then
nobody can say whether the change was kept, and the caller gets ``Unavailable`` (a mount's
caller ``EIO``): an unknown outcome is never acknowledged. If no new connection can be made,
the database is marked unreachable and calls fail fast with ``Unavailable`` instead of each
waiting for a server that is not there; a new connection is tried at most every
``RECONNECT_INTERVAL_S``, or — for a process that must never block on the network, a mount —
only by ``probe()``, which it calls from a worker thread (``reconnect_by_probe``). A write at
once (``write_at_once``) is ``WriteWouldWait`` instead, nothing done, for the first
``Patience.UNREACHABLE_S`` of the outage: its caller waits out a restart, serving others.

The SQLite WAL and this process's queue for its write lock: store/wal.py.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from mnemofs.errors import Patience, Unavailable, WriteWouldWait
from mnemofs.store.engine import SQLITE_BUSY_TIMEOUT_MS, Engine, driver_failure, first_line, refused
from mnemofs.store.listener import Listener
from mnemofs.store.notices import NOTIFY, Notices
from mnemofs.store.pgpipe import PipelineTx
from mnemofs.store.pgwait import Spin
from mnemofs.store.tx import Statements, Tx
from mnemofs.store.wal import ERASE_WAIT_S, Wal

T = TypeVar("T")

# serialization_failure, deadlock_detected; a prepared statement lost (store/pgpipe.py)
_PG_RETRYABLE = {"40001", "40P01", "26000"}
_RETRIES = 8
# write_at_once on PostgreSQL: a row lock held longer than this makes the write WriteWouldWait
# (a save waiting on another's is a few ms; a store's restore or prune holds it for seconds).
# Set once on the connection; its other writes lift it for their own transaction (to what the
# session had: the server's, the role's or the URL's): setting it for each write at once instead
# cost ~7 µs of a ~175 µs change. A read that gives up on a lock lifts it for the session.
AT_ONCE_LOCK_WAIT_MS = 50
_PG_IMPATIENT = f"SET lock_timeout = '{AT_ONCE_LOCK_WAIT_MS}ms'"
_PG_PATIENT = "SET LOCAL lock_timeout = DEFAULT"
# ...and a try again asks only this long: the lock has been held for the first try's 50 ms.
# Sixteen programs saving into one mount during a restore made their tries again and again,
# and with 50 ms each its thread was blocked nearly all the time, every other request waiting.
_PG_AGAIN = "SET LOCAL lock_timeout = '1ms'"
_PG_LOCK_NOT_AVAILABLE = "55P03"
_LAST_TRY = "last"  # write_at_once(last=True)
_AGAIN = "again"  # write_at_once(again=True)
# SQLite's busy handler's pauses (sqliteDefaultBusyCallback), the last repeated
_BUSY_PAUSES_S = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.025, 0.025, 0.05, 0.05, 0.1)
RECONNECT_INTERVAL_S = 0.5


def _would_wait(why: str, at_once: bool | str) -> Exception:
    """What a write at once that found a lock taken raises: ``WriteWouldWait``, or on its last
    try (``write_at_once(last=True)``) the refusal, nothing changed."""
    if at_once is not _LAST_TRY:
        return WriteWouldWait(why)
    return Unavailable(
        f"the database has been locked by another writer for {Patience.LOCKED_S:g} s "
        f"({why}); nothing was changed"
    )


class Database(Statements):
    """The service's access to one engine's database (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine.dialect)
        self.engine = engine
        self._local = threading.local()
        # Every thread's connection, by its thread: a connection whose thread has ended is
        # closed when the next one is made (worker threads come and go: trio retires idle ones,
        # and each new one would otherwise leave a connection open for good).
        self._all: dict[threading.Thread, Any] = {}
        self._lock = threading.Lock()
        self._driver_error: type[Exception] = engine.driver.Error
        self._down: str | None = None  # why the database is unreachable, while it is
        self._down_at = 0.0  # when a connection was last tried and failed
        self._down_since = 0.0  # when it first failed (``Patience.unreachable``)
        self.reconnect_by_probe = False  # see the module docstring
        self._deferred = False  # a worker thread checkpoints (defer_checkpoints)
        self._wal = Wal(engine.sqlite_path) if self.dialect == "sqlite" else None
        self._notices = Notices(self._tell, self._discard) if self.dialect == "postgresql" else None

    @property
    def unavailable(self) -> str | None:
        """Why the database is unreachable, or None while it is reachable."""
        return self._down

    def unreachable_for(self) -> float | None:
        return None if self._down is None else time.monotonic() - self._down_since

    def probe(self) -> None:
        """Try to reach the database (blocking); ``Unavailable`` while it still cannot be."""
        try:
            conn = self.engine.connect()
        except Unavailable as exc:
            self._mark_down(str(exc))
            raise
        try:
            conn.cursor().execute("SELECT 1").fetchall()
        except self._driver_error as exc:
            self._mark_down(first_line(exc))
            raise driver_failure(exc) from exc
        finally:
            with suppress(Exception):
                conn.close()
        self._down = None

    def _mark_down(self, why: str) -> None:
        if self._down is None:
            self._down_since = time.monotonic()
        self._down = why
        self._down_at = time.monotonic()

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._down is not None and (
                self.reconnect_by_probe or time.monotonic() - self._down_at < RECONNECT_INTERVAL_S
            ):
                raise Unavailable(f"the database is unreachable: {self._down}")
            try:
                conn = self.engine.connect()
            except Unavailable as exc:
                self._mark_down(str(exc))
                raise
            self._down = None
            if self.dialect == "postgresql":
                conn.autocommit = True  # transactions are ours: see _postgres
            self._local.conn = conn
            with self._lock:
                ended = [t for t in self._all if not t.is_alive()]
                orphans = [self._all.pop(t) for t in ended]
                self._all[threading.current_thread()] = conn
            for orphan in orphans:
                with suppress(Exception):
                    orphan.close()
            if getattr(self._local, "interactive", False):
                self._make_interactive(conn)  # after it is known: close() reaches it
        return conn

    def _discard(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._lock:
                if self._all.get(threading.current_thread()) is conn:
                    del self._all[threading.current_thread()]
            with suppress(Exception):  # a broken connection may fail to close
                conn.close()

    def data_version(self) -> int | None:
        """SQLite's counter of commits by other connections (changes iff someone else wrote);
        None where the database has no such thing."""
        if self.dialect != "sqlite":
            return None
        cursor = self._connection().cursor()
        try:
            return int(cursor.execute("PRAGMA data_version").fetchone()[0])
        except self._driver_error as exc:
            raise driver_failure(exc) from exc
        finally:
            cursor.close()

    def commit_files(self) -> list[str]:
        """Files that every commit writes (SQLite: the WAL, and the database for a journal);
        watching them hears commits from other processes. None for a server database."""
        if self.dialect != "sqlite":
            return []
        path = self.engine.sqlite_path
        return [path + "-wal", path]

    def defer_checkpoints(self) -> None:
        """Stop this thread's commits from checkpointing the SQLite WAL (the copy back into the
        database file and its fsync were most of a save's commit time); whoever calls this
        must call ``checkpoint`` from another thread a few times a second."""
        if self.dialect == "sqlite":
            self._connection().execute("PRAGMA wal_autocheckpoint = 0")
            self._deferred = True

    def serve_interactively(self) -> None:
        """Mark this thread as the one that answers a program waiting on every reply (a
        mount's request loop). On PostgreSQL its connection (and any made again on it later)
        then waits for replies by spinning first within a stream of saves (store/pgwait.py)
        and plans no whole-table scan where an index can answer: after a VACUUM of an emptied
        table its statistics say it is empty, so a cached plan kept scanning it while a store
        refilled (a rename's path check 3x slower until the next ANALYZE, up to a minute later;
        issue 17). Every query of that thread has an index to use. Nothing changes on SQLite."""
        if self.dialect == "postgresql":
            self._local.interactive = True
            conn = getattr(self._local, "conn", None)
            if conn is not None:
                self._make_interactive(conn)

    def write_at_once(self, on: bool = True, *, again: bool = False, last: bool = False) -> None:
        """For a thread that must never wait for SQLite's write lock (a server's event loop,
        which every request shares; a mount's, which every FUSE request does): the next write
        transaction begun on this thread raises ``WriteWouldWait``, having done nothing, when
        this process's turn to write or the database's lock is taken (another thread's or
        process's write, a CLI's import), instead of waiting for it (up to
        ``SQLITE_BUSY_TIMEOUT_MS``). On PostgreSQL, when a row lock it needs is held for
        ``AT_ONCE_LOCK_WAIT_MS`` (another transaction's on the store: a restore, a prune). Its
        caller then makes its call again a little later, having served others meanwhile
        (``errors.Patience``). Later writes wait as usual: the call has changed something by
        then (``_begin_patiently``). ``last``: the caller has waited long enough, and a lock
        still taken is ``Unavailable``, nothing changed: refused here, so that the caller's
        own handling of a failed write runs as for any (a mount puts the file back as saved).
        ``again``: a try after ``WriteWouldWait`` (on PostgreSQL it asks for the lock 1 ms).
        ``on=False`` after the call: a call that wrote nothing leaves no such write to
        whatever this thread does next."""
        self._local.at_once = (_LAST_TRY if last else _AGAIN if again else True) if on else False

    @staticmethod
    def _make_interactive(conn: Any) -> None:
        conn.spin = Spin()
        conn.execute("SET enable_seqscan = off")  # for the session (autocommit: at once)

    @property
    def deferred(self) -> bool:
        """Whether a background thread checkpoints (``defer_checkpoints``)."""
        return self._deferred

    def wal_size(self) -> int:
        """The size of the SQLite WAL file in bytes (0 for a server database)."""
        return 0 if self._wal is None else self._wal.size()

    def flush_to_disk(self) -> None:
        """Every commit so far made to survive a power loss (SQLite: ``Wal.sync``)."""
        if self._wal is not None:
            self._wal.sync()

    def checkpoint_due(self) -> bool:
        """Whether ``checkpoint`` would do anything now (store/wal.py): no query."""
        return self._wal is not None and self._wal.due()

    def checkpoint_in(self) -> float | None:
        """Seconds until ``checkpoint_due`` (0 or less: now), if nobody writes meanwhile; None
        while nothing will be due (store/wal.py: ``Wal.due_in``). A stat, no query."""
        return None if self._wal is None else self._wal.due_in()

    def checkpoint(self, *, force: bool = False) -> None:
        """Copy the SQLite WAL back into the database, and start it over once it is long or
        cut it once it has been idle for a while, or with ``force`` (store/wal.py); unless
        ``force``, only when it changed or ``WAL_CHECKPOINT_INTERVAL_S`` has passed. Never
        waits long for readers or writers."""
        wal = self._wal
        if wal is None or not (wal.due() or (force and wal.size())):
            return
        try:
            cut = force or wal.idle()
            wal.rewind(self._connection(), cut=cut, prime=not cut and wal.due_by_time())
        except self._driver_error as exc:
            raise driver_failure(exc) from exc
        wal.passed()

    def clear_wal(self, timeout_s: float = ERASE_WAIT_S) -> bool:
        """Empty the SQLite WAL file (after an erasing change: its older frames still hold what
        was erased), waiting up to ``timeout_s`` for readers in it; False if they outlasted it."""
        wal = self._wal
        if wal is None:
            return True
        deadline = time.monotonic() + timeout_s
        conn = self._connection()
        while True:
            try:
                done = wal.rewind(conn, cut=True)
            except self._driver_error as exc:
                raise driver_failure(exc) from exc
            if done:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def step_aside(self) -> None:
        """Between a background job's write transactions: let this process's waiting writers
        go first (SQLite; store/wal.py)."""
        if self._wal is not None:
            self._wal.step_aside()

    def vacuum(self, tables: tuple[str, ...]) -> None:
        """Rewrite the database without the space deleted rows left: SQLite ``VACUUM`` (the
        whole file); PostgreSQL ``VACUUM FULL`` of ``tables`` (new files; the old ones, with
        their dead tuples, are removed) and a ``CHECKPOINT``."""
        try:
            if self.dialect == "sqlite":
                self._connection().execute("VACUUM")
                return
            conn = self.engine.connect()
            try:
                conn.autocommit = True
                for table in tables:
                    conn.execute(f"VACUUM FULL {table}")
                conn.execute("CHECKPOINT")
            finally:
                conn.close()
        except self._driver_error as exc:
            raise driver_failure(exc) from exc

    def listener(self, channel: str) -> Listener | None:
        """A connection that hears ``NOTIFY channel`` (PostgreSQL); None elsewhere."""
        if self.dialect != "postgresql":
            return None
        conn = self.engine.connect()
        conn.autocommit = True
        conn.execute(f"LISTEN {channel}")
        return Listener(conn, self._backend_pids)

    def _backend_pids(self) -> set[int]:
        """The server processes of this Database's own connections (PostgreSQL)."""
        with self._lock:
            conns = list(self._all.values())
        return {c.info.backend_pid for c in conns if not c.closed}

    def _tell(self, stores: list[str]) -> None:
        """Notify listening mounts that ``stores`` changed (``Notices``' thread)."""

        def notify(tx: Tx) -> None:
            for store in stores:
                tx.run(NOTIFY, {"store": store})

        self.run(notify, write=True)

    def close(self) -> None:
        """Tell listening mounts what is left to tell and give every thread's connection back
        (call when done with the service)."""
        if self._notices is not None:
            self._notices.stop()
        with self._lock:
            conns, self._all = list(self._all.values()), {}
        for conn in conns:
            with suppress(self._driver_error):
                conn.close()
        self._local = threading.local()

    def _sqlite(self, fn: Callable[[Tx], T], write: bool, state: list[bool]) -> T:
        """``fn`` in one SQLite transaction, a writer's in this process's turn (``Wal``).
        Plain calls and ``try``, no context managers: every change passes here, and their
        generators cost one ~13 µs (issue 17)."""
        wal = self._wal
        assert wal is not None
        dbapi = self._connection()
        at_once: bool | str = False
        impatient = False
        if write:
            local = self._local
            at_once = getattr(local, "at_once", False)
            impatient = getattr(local, "impatient", None) is dbapi
            if not at_once:
                wal.take_turn()
            elif not wal.try_turn():  # (its writer may itself wait for another process's lock)
                raise _would_wait("another thread of this process is writing", at_once)
            else:
                local.at_once = False
        try:
            cursor = dbapi.cursor()
            try:
                if at_once:
                    self._begin_at_once(cursor, impatient, at_once)
                elif impatient:
                    self._begin_patiently(cursor)
                else:
                    cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                result = fn(Tx(self, cursor))
                state.append(True)  # committing: a broken connection is an unknown outcome
                cursor.execute("COMMIT")
            except BaseException:
                try:
                    if dbapi.in_transaction:
                        cursor.execute("ROLLBACK")
                except self._driver_error:
                    self._discard()
                raise
            finally:
                # Not ``suppress``, a context manager: ~1 µs a change. It raises only once the
                # connection was discarded.
                try:  # noqa: SIM105
                    cursor.close()
                except self._driver_error:
                    pass
        finally:
            if write:
                wal.end_turn()
        if write and not self._deferred and wal.cut_due():  # no worker checkpoints for us
            with suppress(Unavailable):  # housekeeping: the commit stands
                self.checkpoint(force=True)
        return result

    def _postgres(self, fn: Callable[[Tx], T], write: bool, state: list[bool], snapshot: bool) -> T:
        """``fn`` in one PostgreSQL transaction; plain calls, as ``_sqlite``."""
        dbapi = self._connection()
        if write:
            # libpq's pipeline, with our own BEGIN and COMMIT (store/pgpipe.py): statements
            # whose result nobody reads (Tx.run) go with the next one that needs an answer, the
            # last of them with the COMMIT; one round trip in all needs neither. No driver
            # cursor (~5 µs to make one).
            local = self._local
            at_once = getattr(local, "at_once", False)
            impatient = getattr(local, "impatient", None) is dbapi
            if at_once:
                local.at_once = False
                if not impatient:  # once per connection (as SQLite's busy timeout)
                    dbapi.execute(_PG_IMPATIENT)
                    local.impatient, impatient = dbapi, True
            tx = PipelineTx(self, dbapi)
            try:
                try:
                    # SET LOCAL wants an explicit transaction (else a WARNING)
                    patient = impatient and not at_once
                    again = at_once in (_AGAIN, _LAST_TRY)
                    tx.begin(now=patient or again)
                    if patient:
                        tx.run(_PG_PATIENT)  # a write that may wait, as ever: with its BEGIN
                    elif again:
                        tx.run(_PG_AGAIN)  # a try again (or the last)
                    result = fn(tx)
                    state.append(True)
                    tx.commit()
                finally:
                    # Told once committed, or maybe committed (the connection broke meanwhile).
                    if state and tx.told and self._notices is not None:
                        self._notices.committed(tx.told)
                    tx.close()  # out of pipeline mode: before the rollback below
            except BaseException as exc:
                self._roll_back(dbapi)
                if at_once and getattr(exc, "sqlstate", None) == _PG_LOCK_NOT_AVAILABLE:
                    # Failed, so not committed (the error came before the COMMIT took effect).
                    why = "another transaction holds a lock this write needs"
                    raise _would_wait(why, at_once) from None
                raise
            return result
        cursor = dbapi.cursor()
        try:
            if not snapshot:
                # Each statement on its own (the connection is in autocommit mode): under READ
                # COMMITTED every statement of a transaction takes a snapshot of its own anyway,
                # and the driver's BEGIN and COMMIT were a round trip each.
                return fn(Tx(self, cursor))
            cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            result = fn(Tx(self, cursor))
            cursor.execute("COMMIT")
            return result
        except BaseException as exc:
            self._roll_back(dbapi)
            local = self._local
            impatient = getattr(local, "impatient", None) is dbapi
            if not impatient or getattr(exc, "sqlstate", None) != _PG_LOCK_NOT_AVAILABLE:
                raise
            # A lock it waited for (a table's: a VACUUM FULL, a migration) outlasted the timeout
            # a write at once left on the connection: the read waits as any does, made again.
            local.impatient = None
        finally:
            with suppress(self._driver_error):
                cursor.close()
        dbapi.execute("SET lock_timeout = DEFAULT")
        return self._postgres(fn, write, state, snapshot)

    def _roll_back(self, dbapi: Any) -> None:
        try:
            dbapi.rollback()
        except self._driver_error:
            self._discard()

    def run(
        self, fn: Callable[[Tx], T], *, write: bool, once: bool = False, snapshot: bool = False
    ) -> T:
        """``fn`` in one transaction, retried on transient failures (a busy SQLite file, a
        PostgreSQL serialization failure or deadlock, a connection that broke). With
        ``once``, never run twice: for an ``fn`` with effects outside the database (an
        export writing a file, an import reading one), a failure is ``Unavailable`` at once.
        A read (``write=False``) on PostgreSQL sees what each of its statements sees (READ
        COMMITTED); with ``snapshot`` all of them see one snapshot (REPEATABLE READ). On SQLite
        a read transaction is one snapshot either way."""
        delay = 0.005
        replaced = False
        sqlite = self._wal is not None
        armed = write and getattr(self._local, "at_once", False)  # before a try takes it
        for attempt in range(_RETRIES):
            committing: list[bool] = []
            try:
                if sqlite:
                    return self._sqlite(fn, write, committing)
                return self._postgres(fn, write, committing, snapshot)
            except Unavailable as exc:
                if self._down is None:
                    raise
                # No connection (a broken one rolled back what it had): nothing done.
                raise Patience.unreachable(exc, armed, self.unreachable_for()) from None
            except self._driver_error as exc:
                transient, broken = self._classify(exc)
                if once:
                    if broken:
                        self._discard()
                    raise refused(exc) from exc
                if broken:
                    self._discard()
                    if committing:
                        raise Unavailable(
                            "the connection to the database broke while committing; the change "
                            f"may or may not have been kept ({first_line(exc)})"
                        ) from exc
                    if not replaced:  # a connection from before a server restart: once more
                        replaced = True
                        continue
                    self._mark_down(first_line(exc))
                    refusal = driver_failure(exc)
                    raise Patience.unreachable(refusal, armed, self.unreachable_for()) from exc
                if not transient or attempt == _RETRIES - 1:
                    raise refused(exc) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    def _begin_at_once(self, cursor: Any, impatient: bool, at_once: bool | str) -> None:
        """``BEGIN IMMEDIATE`` without SQLite's busy handler: ``WriteWouldWait`` if the lock is
        taken (``write_at_once``). The connection is made impatient the first time (its busy
        timeout 0, ``_local.impatient``) and stays so: setting it before and after every such
        write cost a change ~6 µs, a tenth of an ``rmdir``. Its other writes wait in
        ``_begin_patiently`` instead of SQLite's busy handler."""
        if not impatient:
            cursor.execute("PRAGMA busy_timeout = 0")
            self._local.impatient = cursor.connection
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except self._driver_error as exc:
            if not self._classify(exc)[0]:  # not busy: a real failure, the caller's to see
                raise
            raise _would_wait("another process is writing to the database", at_once) from None

    def _begin_patiently(self, cursor: Any) -> None:
        """``BEGIN IMMEDIATE`` on an impatient connection (``_begin_at_once``) for a write that
        may wait: tried again after the pauses SQLite's busy handler makes, up to its
        ``SQLITE_BUSY_TIMEOUT_MS``. (Its reads keep no busy handler: in WAL mode a reader
        waits for nobody but a recovery, and ``run`` tries a busy one again.)"""
        waited = 0.0
        for pause in itertools.chain(_BUSY_PAUSES_S, itertools.repeat(_BUSY_PAUSES_S[-1])):
            try:
                cursor.execute("BEGIN IMMEDIATE")
                return
            except self._driver_error as exc:
                if not self._classify(exc)[0] or waited >= SQLITE_BUSY_TIMEOUT_MS / 1000:
                    raise
            time.sleep(pause)
            waited += pause

    def _classify(self, exc: Exception) -> tuple[bool, bool]:
        """(worth retrying, connection unusable)."""
        if self.dialect == "sqlite":
            message = str(exc).lower()
            return ("locked" in message or "busy" in message), False
        if getattr(exc, "sqlstate", None) in _PG_RETRYABLE:
            return True, False
        conn = getattr(self._local, "conn", None)
        broken = conn is None or conn.closed or bool(getattr(conn, "broken", False))
        return broken, broken
