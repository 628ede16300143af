"""Opening a database: where it is, how its connections are set up, and its schema revision.

SQLite is the default: a file under ``$MNEMOFS_DB`` or the XDG data directory, in WAL mode with
``synchronous=NORMAL`` (a committed transaction survives a crash of the process; only a power
loss can lose the last ones). Write transactions start with ``BEGIN IMMEDIATE`` so two writers
queue on the busy timeout instead of failing halfway with "database is locked". PostgreSQL is
reached through a ``postgresql+psycopg://`` URL.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import Connection, make_url

from mnemofs.errors import InvalidRequest
from mnemofs.store.schema import SCHEMA_REVISION

ENV_DB = "MNEMOFS_DB"
WRITE_OPTION = "mnemofs_write"
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 65_536  # per connection, at most: a full store's memories stay in memory
# Checkpoint the WAL every ~40 MB instead of every 4 MB: each checkpoint syncs the database
# file, and with every save writing a version this took 10-25% of save time (measured).
SQLITE_CHECKPOINT_PAGES = 10_000


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


def _setup_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # Let us issue BEGIN ourselves (the driver's implicit transactions cannot be IMMEDIATE).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        cur.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_CHECKPOINT_PAGES}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def make_engine(url: str | None = None, *, check_schema: bool = True) -> Engine:
    """An engine for ``url`` (see ``resolve_url``), with a new database's schema created."""
    resolved = make_url(resolve_url(url))
    if resolved.get_backend_name() == "sqlite":
        if resolved.database and resolved.database != ":memory:":
            Path(resolved.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(resolved)
        _setup_sqlite(engine)
    elif resolved.get_backend_name() == "postgresql":
        engine = create_engine(resolved, pool_pre_ping=True)
    else:
        raise InvalidRequest(f"unsupported database URL {resolved.render_as_string()!r}")
    if check_schema:
        ensure_schema(engine)
    return engine


def current_revision(conn: Connection) -> str | None:
    """The Alembic revision recorded in the database, or None for a database with no schema."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def ensure_schema(engine: Engine) -> None:
    """Create the schema in a new database; refuse a database at another revision."""
    with engine.connect() as conn:
        revision = current_revision(conn)
        conn.rollback()
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
    with engine.connect().execution_options(**{WRITE_OPTION: True}) as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.commit()
