"""Shared fixtures: a fresh workspace on SQLite and on the PostgreSQL server scripts/test starts.

The PostgreSQL URL comes from ``MNEMOFS_TEST_PG_URL``. Without it the PostgreSQL tests fail, so a
missing server is never mistaken for a pass; a developer may opt out with ``MNEMOFS_SKIP_PG=1``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemofs.api import Workspace
from mnemofs.store import Engine, MemoryService, make_engine, upgrade
from mnemofs.store.schema import metadata

PG_URL_ENV = "MNEMOFS_TEST_PG_URL"
SKIP_PG_ENV = "MNEMOFS_SKIP_PG"

_pg_engine: Engine | None = None


def pg_url() -> str:
    url = os.environ.get(PG_URL_ENV)
    if url:
        return url
    if os.environ.get(SKIP_PG_ENV) == "1":
        pytest.skip(f"PostgreSQL tests skipped: {SKIP_PG_ENV}=1")
    pytest.fail(
        f"{PG_URL_ENV} is not set: run the suite through scripts/test, which starts PostgreSQL "
        f"(or set {SKIP_PG_ENV}=1 to skip these tests on purpose)"
    )


def _fresh_pg_engine() -> Engine:
    """The PostgreSQL engine, shared by the run, with every table emptied."""
    global _pg_engine
    if _pg_engine is None:
        _pg_engine = make_engine(pg_url(), check_schema=False)
        upgrade(_pg_engine)  # a developer's long-lived test database may be a revision behind
    conn = _pg_engine.connect()
    try:
        # search_marks (0015) is the migrations' own, as the search objects are: not in metadata
        names = ", ".join([*(t.name for t in metadata.sorted_tables), "search_marks"])
        conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
        conn.commit()
    finally:
        conn.close()
    return _pg_engine


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mnemofs.db'}"
    _fresh_pg_engine()
    return pg_url()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    if db_url.startswith("postgresql"):
        yield _fresh_pg_engine()
        return
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def service(engine: Engine) -> Iterator[MemoryService]:
    svc = MemoryService(engine, actor="api")
    yield svc
    svc.close()


@pytest.fixture
def ws(service: MemoryService) -> Workspace:
    return Workspace(service)


@pytest.fixture
def store_id(service: MemoryService) -> str:
    return service.create_store("Test Store", "for tests").id


# The mounted suites that run over both backends: the daemon on the database, and the daemon
# behind `mnemofs serve` with only a session token (issue 15).
BOTH_WAYS = {
    "test_mount",
    "test_mount_differential",
    "test_same_files",
    "test_shared",
    "test_history",
    "test_notices",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_WAYS:
        metafunc.parametrize("mount_via", ["local", "remote"], indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def mount_via(request: pytest.FixtureRequest) -> Iterator[str]:
    """How this module's mounts reach the stores (see ``mounted.VIA``): both ways in the
    ``BOTH_WAYS`` modules, else local. Module-scoped, so a module's own mount fixtures are
    made once per way, after it is set; autouse, so every test's fixtures include it (a name
    only appended to a test's fixture names in ``pytest_generate_tests`` was parametrized
    but never set up with pytest 9.2, as installed here: the "remote" runs were local ones)."""
    from . import mounted

    mounted.VIA = getattr(request, "param", "local")
    try:
        yield mounted.VIA
    finally:
        mounted.VIA = "local"


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Round trips of each PostgreSQL write transaction (store/pgpipe.py) the test's own
    thread makes, one count per transaction, in the order they ran (not the notices a
    service's thread sends after them, store/notices.py)."""
    from mnemofs.store.pgpipe import PipelineTx

    counts: list[int] = []
    real_sync, real_init = PipelineTx._sync, PipelineTx.__init__
    test_thread = threading.current_thread()

    def init(self: PipelineTx, *args: Any) -> None:
        real_init(self, *args)
        if threading.current_thread() is test_thread:
            counts.append(0)

    def sync(self: PipelineTx) -> None:
        if threading.current_thread() is test_thread:
            counts[-1] += 1
        real_sync(self)

    monkeypatch.setattr(PipelineTx, "__init__", init)
    monkeypatch.setattr(PipelineTx, "_sync", sync)
    return counts
