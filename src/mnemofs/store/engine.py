"""Opening a database: where it is, how its connections are set up, and its schema revision.

SQLite is the default: a file under ``$MNEMOFS_DB`` or the XDG data directory, in WAL mode with
``synchronous=NORMAL`` (a committed transaction survives a crash of the process; only a power
loss can lose the last ones). Write transactions start with ``BEGIN IMMEDIATE`` (see ``sql.py``)
so two writers queue on the busy timeout instead of failing halfway with "database is locked".
PostgreSQL is reached through a ``postgresql+psycopg://`` URL.

``Engine`` here is mnemofs' own and minimal: a URL and a way to open a configured driver
connection. Importing SQLAlchemy costs ~0.3 s, longer than most CLI commands take, so the
runtime path never does; SQLAlchemy is loaded only to create or migrate a schema (Alembic) and
by tests and tools that ask for ``Engine.sqlalchemy()``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mnemofs.errors import InvalidRequest, MnemofsError, StorageFull, Unavailable
from mnemofs.private import create_private_file, private_dir
from mnemofs.store.pgwait import connection_class
from mnemofs.store.revision import SCHEMA_REVISION

if TYPE_CHECKING:
    import sqlalchemy

log = logging.getLogger("mnemofs")

ENV_DB = "MNEMOFS_DB"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Per connection, at most (a mount has two or three): the hot pages of a full store (indexes,
# recent rows); the rest comes from the OS's page cache at a read call each. 64 MiB kept a
# mount of a full store over 100 MB resident after the benchmark, 16 MiB at 105 MB, 8 MiB 87 MB
# with no phase slower (issue 17).
SQLITE_CACHE_KIB = 8_192
# Checkpoint the WAL every ~40 MB instead of every 4 MB: each checkpoint syncs the database
# file, and with every save writing a version this took 10-25% of save time (measured).
SQLITE_CHECKPOINT_PAGES = 10_000
# A WAL file that a restart left larger than this is cut back to it at the next commit (SQLite
# never shrinks it otherwise), by the committing writer: above what a mount's log reaches
# between its checkpoints under load (8-25 MiB), so a save rarely pays for that. How the log
# gets restarted, and cut when idle: store/wal.py.
SQLITE_JOURNAL_SIZE_LIMIT = 32 * 1024 * 1024


class SchemaOutOfDate(InvalidRequest):
    """The database was made by another version of mnemofs and needs ``mnemofs db upgrade``."""


def default_sqlite_path() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "mnemofs" / "mnemofs.db"


def resolve_url(url: str | None = None) -> str:
    """The database URL from an argument, ``$MNEMOFS_DB`` or the default SQLite file.

    A value without ``://`` is a path to a SQLite file.
    """
    value = url or os.environ.get(ENV_DB) or str(default_sqlite_path())
    if "://" in value:
        return value
    return "sqlite:///" + str(Path(value).expanduser().absolute())


@dataclass
class Engine:
    """A database by URL: its dialect, its driver, configured connections on demand."""

    url: str
    dialect: str  # "sqlite" or "postgresql"
    driver: ModuleType
    _sqlalchemy: Any = field(default=None, repr=False)

    @property
    def sqlite_path(self) -> str:
        return self.url[len("sqlite:///") :]

    def connect(self) -> Any:
        """A new driver connection, set up as the service expects (see the module docstring)."""
        try:
            if self.dialect == "sqlite":
                return _sqlite_connection(self.sqlite_path)
            extra = _pg_defaults(self.url)
            conn = connection_class().connect(_libpq_uri(self.url), autocommit=False, **extra)
            _configure_postgres(conn)
            return conn
        except self.driver.Error as exc:
            raise Unavailable(f"cannot open the database {self.safe_url}: {exc}") from exc

    @property
    def safe_url(self) -> str:
        """The URL without its password, for messages."""
        scheme, sep, rest = self.url.partition("://")
        if "@" in rest.split("/", 1)[0]:
            creds, _, host = rest.partition("@")
            rest = creds.split(":", 1)[0] + "@" + host
        return scheme + sep + rest

    def sqlalchemy(self) -> sqlalchemy.Engine:
        """A SQLAlchemy engine for the same database (migrations, tests, tools)."""
        if self._sqlalchemy is None:
            from sqlalchemy import create_engine, event

            engine = create_engine(self.url)
            if self.dialect == "sqlite":

                @event.listens_for(engine, "connect")
                def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                    _configure_sqlite(dbapi_conn)

            self._sqlalchemy = engine
        return self._sqlalchemy  # type: ignore[no-any-return]

    def dispose(self) -> None:
        if self._sqlalchemy is not None:
            self._sqlalchemy.dispose()
            self._sqlalchemy = None


def _libpq_uri(url: str) -> str:
    return "postgresql://" + url.partition("://")[2]


# A server that vanishes from the network must not hang a mount: give up connecting after 5 s
# and notice a dead peer within ~15 s (libpq's own defaults wait for the OS, hours). Ignored on
# Unix sockets; a URL that sets any of these wins.
PG_CONNECT_DEFAULTS = {
    "connect_timeout": 5,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}


def _pg_defaults(url: str) -> dict[str, int]:
    return {k: v for k, v in PG_CONNECT_DEFAULTS.items() if k not in url}


def _configure_postgres(conn: Any) -> None:
    """Content this session writes is compressed with lz4 where the server has it (PostgreSQL
    14 and later, built with lz4), not pglz: a 4 KiB note of prose cost the server 56-76 µs to
    insert with pglz and 18-26 µs with lz4, and a save of new content writes it (once, in
    ``contents``). Values already stored keep the compression they have.

    The server sends this session warnings and errors, not notices: nothing here reads them,
    and the search index's catch-up drew one for every text with a word too long to index
    (over 2,047 characters: a base64 blob, a minified line), which the server formats and
    sends whether or not the client looks (2,000 such rows: 93-98 ms without, 120-140 with)."""
    conn.execute(
        "SELECT set_config('client_min_messages', 'warning', false), "
        "(SELECT set_config('default_toast_compression', 'lz4', false) FROM pg_settings "
        "WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals))"
    )
    conn.commit()


def _configure_sqlite(conn: Any) -> None:
    cur = conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode = WAL")
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
    cur.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_CHECKPOINT_PAGES}")
    cur.execute(f"PRAGMA journal_size_limit = {SQLITE_JOURNAL_SIZE_LIMIT}")
    # Deleted and overwritten content is zeroed in the file, not left in free space: what a
    # redaction, a prune or a store delete removes must not be findable (docs/decisions.md).
    cur.execute("PRAGMA secure_delete = ON")
    cur.close()


def _sqlite_connection(path: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN ourselves (the driver's implicit transactions
    # cannot be IMMEDIATE). Each thread has its own connection (sql.py), but closing them all
    # happens from one thread, hence check_same_thread=False.
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        check_same_thread=False,
        timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
    )
    _configure_sqlite(conn)
    return conn


def is_default_location(url: str | None) -> bool:
    """Does ``url`` (an argument, maybe None) leave the database at the default location?"""
    return not url and not os.environ.get(ENV_DB)


def make_engine(
    url: str | None = None, *, check_schema: bool = True, create: bool = True
) -> Engine:
    """The database at ``url`` (see ``resolve_url``), with a new database's schema created.

    ``create=False``: a SQLite file that does not exist is an error naming its path, and
    nothing is made (a typo in a path must not look like an empty workspace)."""
    resolved = resolve_url(url)
    scheme = resolved.split("://", 1)[0]
    if scheme == "sqlite":
        path = resolved[len("sqlite:///") :]
        if not path or not resolved.startswith("sqlite:///"):
            raise InvalidRequest(f"a SQLite URL needs a file path, got {resolved!r}")
        if not create and not Path(path).exists():
            raise Unavailable(
                f"no database at {path}: check --db or ${ENV_DB} (a new one is made only by "
                "'mnemofs stores create' or 'mnemofs db upgrade', or at the default location)"
            )
        _private_sqlite_file(Path(path))
        engine = Engine(resolved, "sqlite", sqlite3)
    elif scheme in ("postgresql", "postgresql+psycopg"):
        try:
            import psycopg
        except ImportError:
            raise InvalidRequest(
                "PostgreSQL needs the driver: pip install 'mnemofs[postgres]'"
            ) from None
        engine = Engine(resolved, "postgresql", psycopg)
    else:
        raise InvalidRequest(f"unsupported database URL {resolved!r}")
    if check_schema:
        ensure_schema(engine)
    return engine


def _private_sqlite_file(path: Path) -> None:
    """A new database file is made 0600 before SQLite opens it (its -wal and -shm take the
    database file's mode), in a 0700 directory if mnemofs makes that too. The default data
    directory, which is mnemofs' own, is tightened to 0700 if others could enter it."""
    if path == default_sqlite_path():
        old = private_dir(path.parent)
        if old is not None:
            log.warning("made %s owner-only (it was %o): memory is private", path.parent, old)
    elif not path.parent.exists():
        private_dir(path.parent, tighten=False)
    create_private_file(path)


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision recorded in the database, or None for a database with no schema."""
    conn = engine.connect()
    try:
        cur = conn.cursor()
        try:
            cur.execute("SELECT version_num FROM alembic_version")
            row = cur.fetchone()
        except engine.driver.Error:
            return None  # no such table: a new database
        finally:
            cur.close()
        return None if row is None else str(row[0])
    finally:
        conn.rollback()
        conn.close()


def ensure_schema(engine: Engine) -> None:
    """Create the schema in a new database; refuse a database at another revision."""
    revision = current_revision(engine)
    if revision == SCHEMA_REVISION:
        return
    if revision is None:
        upgrade(engine)
        return
    raise SchemaOutOfDate(
        f"database schema is at revision {revision!r}, this mnemofs needs {SCHEMA_REVISION!r}: "
        "run 'mnemofs db upgrade'"
    )


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run the Alembic migrations up to ``revision`` (the newest by default)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.sqlalchemy().connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.commit()


def driver_failure(exc: Exception) -> Unavailable:
    """The domain error for a driver's error; a full disk is told as such (SQLite's
    ``SQLITE_FULL``, PostgreSQL's ``disk_full``): retrying cannot help, and a mount says
    ENOSPC, not EIO."""
    if getattr(exc, "sqlite_errorname", None) == "SQLITE_FULL" or (
        getattr(exc, "sqlstate", None) == "53100"
    ):
        return StorageFull(f"the database's disk is full: {first_line(exc)}")
    return Unavailable(f"database error: {first_line(exc)}")


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# psycopg's refusal of a string holding NUL, before anything is sent (pgpipe.py's too): no
# PostgreSQL text holds one. What a caller writes is checked before; an id or a name a caller
# only looks up is not, and is refused this way.
NUL_REFUSED = "PostgreSQL text fields cannot contain NUL (0x00) bytes"


def refused(exc: Exception) -> MnemofsError:
    """The domain error for a driver's error in a transaction: a value no database holds is
    the request's fault, not the database's (never retried); else ``driver_failure``."""
    if NUL_REFUSED in str(exc):
        return InvalidRequest("a value given contains a NUL character, which nothing stored holds")
    return driver_failure(exc)
