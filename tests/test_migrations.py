"""The schema in ``schema.py`` and the Alembic migrations must describe the same database."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

import mnemofs.store.engine as engine_module
from mnemofs.store import Engine, MemoryService, make_engine, upgrade
from mnemofs.store.engine import SchemaOutOfDate, current_revision
from mnemofs.store.schema import SCHEMA_REVISION, SEARCH_OBJECTS, metadata


def test_schema_revision_is_the_newest_migration() -> None:
    config = Config()
    config.set_main_option(
        "script_location", str(Path(engine_module.__file__).parent / "migrations")
    )
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_REVISION


def test_migrated_database_matches_schema(engine: Engine) -> None:
    assert current_revision(engine) == SCHEMA_REVISION
    with engine.sqlalchemy().connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"include_object": lambda obj, name, *_: name not in SEARCH_OBJECTS}
        )
        diff = compare_metadata(context, metadata)
    assert diff == []


def test_new_database_is_created_and_old_one_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'db.sqlite'}"
    engine = make_engine(url)  # creates the directory and the schema
    with engine.sqlalchemy().begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    with pytest.raises(SchemaOutOfDate, match="mnemofs db upgrade"):
        make_engine(url)
    engine.dispose()


def test_upgrade_is_idempotent(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}", check_schema=False)
    upgrade(engine)
    upgrade(engine)
    assert current_revision(engine) == SCHEMA_REVISION
    engine.dispose()


def test_0006_keeps_versions_and_never_reuses_a_seq(tmp_path: Path) -> None:
    """SQLite handed the highest seq out again once its row was deleted (a fold deletes the
    newest versions); 0006 rebuilds the table with AUTOINCREMENT and keeps every row."""
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}", check_schema=False)
    upgrade(engine, "0005")
    with engine.sqlalchemy().begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_stores (id, name, description, created_at, updated_at, "
                "memory_count, revision, kind, owner, on_full) VALUES ('memstore_1', 's', '', 't', "
                "'t', 0, 0, 'memory', '', 'refuse')"
            )
        )
        for seq in (1, 2):
            conn.execute(
                text(
                    "INSERT INTO memory_versions (seq, id, store_id, memory_id, operation, path, "
                    f"size_bytes, created_at, actor) VALUES ({seq}, 'memver_{seq}', 'memstore_1', "
                    "'mem_1', 'created', '/a.md', 0, 't', 'cli')"
                )
            )
    upgrade(engine)
    with engine.sqlalchemy().begin() as conn:
        assert conn.execute(text("SELECT seq, id FROM memory_versions ORDER BY seq")).all() == [
            (1, "memver_1"),
            (2, "memver_2"),
        ]
        conn.execute(text("DELETE FROM memory_versions WHERE seq = 2"))
        conn.execute(
            text(
                "INSERT INTO memory_versions (id, store_id, memory_id, operation, path, "
                "size_bytes, created_at, actor) VALUES ('memver_3', 'memstore_1', 'mem_1', "
                "'modified', '/a.md', 0, 't', 'cli')"
            )
        )
        assert (
            conn.execute(text("SELECT seq FROM memory_versions WHERE id = 'memver_3'")).scalar()
            == 3
        )
        triggers = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'")).all()
    assert triggers  # the search index's triggers on memories survived the rebuild
    engine.dispose()


def test_0007_keeps_existing_stores_as_they_were(tmp_path: Path) -> None:
    """Stores made before the secrets policy keep accepting what they accepted; new stores
    refuse credentials."""
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}", check_schema=False)
    upgrade(engine, "0006")
    with engine.sqlalchemy().begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_stores (id, name, description, created_at, updated_at, "
                "memory_count, revision, kind, owner, on_full) VALUES ('memstore_old', 'old', '', "
                "'t', 't', 0, 0, 'memory', '', 'refuse')"
            )
        )
    upgrade(engine)
    service = MemoryService(engine)
    assert service.get_store("memstore_old").secrets == "allow"
    assert service.create_store("new").secrets == "refuse"
    service.close()
    engine.dispose()


def _an_old_heron(engine: Engine) -> None:
    """A store with one memory, written as a database of an older revision holds them."""
    with engine.sqlalchemy().begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_stores (id, name, description, created_at, updated_at, "
                "memory_count, revision, kind, owner, on_full, secrets, metadata) VALUES "
                "('memstore_1', 's', '', 't', 't', 1, 0, 'memory', '', 'refuse', 'refuse', '{}')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO memories (id, store_id, path, content, content_sha256, size_bytes, "
                "created_at, updated_at, head_version_id) VALUES ('mem_1', 'memstore_1', "
                "'/old.md', 'an indexed heron', 'x', 16, 't', 't', 'memver_1')"
            )
        )


def test_0009_the_index_trails_after_the_upgrade(tmp_path: Path) -> None:
    """A database indexed by 0004's triggers keeps its index: after 0009 the triggers only
    note changes, and a search takes them in."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = make_engine(url, check_schema=False)
    upgrade(engine, "0008")
    _an_old_heron(engine)
    upgrade(engine)
    service = MemoryService(engine)
    assert [h.path for h in service.search("memstore_1", "heron")] == ["/old.md"]
    service.update_memory("memstore_1", "mem_1", content="now an ibis")
    assert service.search("memstore_1", "heron") == []
    assert [h.path for h in service.search("memstore_1", "ibis")] == ["/old.md"]
    assert service.check().problems == []
    service.close()
    engine.dispose()


@pytest.mark.postgres
def test_0013_postgres_vectors_are_made_and_then_trail(tmp_path: Path) -> None:
    """0013 turns PostgreSQL's generated search vector into one that trails saves: rows that
    existed are indexed by the upgrade, later changes empty their row's vector until a catch-up
    (every search first), and the downgrade brings the generated column back."""
    import psycopg
    from alembic import command

    from .conftest import pg_url

    url = pg_url()
    name = f"mnemofs_migrate_{os.getpid()}"
    own_url = urlsplit(url)._replace(path=f"/{name}").geturl()
    admin = psycopg.connect(engine_module._libpq_uri(url), autocommit=True)
    admin.execute(f"DROP DATABASE IF EXISTS {name}")
    admin.execute(f"CREATE DATABASE {name}")
    try:
        engine = make_engine(own_url, check_schema=False)
        upgrade(engine, "0012")
        _an_old_heron(engine)
        upgrade(engine)
        stale = "SELECT COUNT(*) FROM memories WHERE search_vector IS NULL"
        with engine.sqlalchemy().connect() as conn:
            assert conn.execute(text(stale)).scalar() == 0
        service = MemoryService(engine)
        assert [h.path for h in service.search("memstore_1", "heron")] == ["/old.md"]
        service.update_memory("memstore_1", "mem_1", content="now an ibis")
        with engine.sqlalchemy().connect() as conn:
            assert conn.execute(text(stale)).scalar() == 1
        assert service.search("memstore_1", "heron") == []
        assert [h.path for h in service.search("memstore_1", "ibis")] == ["/old.md"]
        assert service.check().problems == []
        service.close()
        config = Config()
        config.set_main_option(
            "script_location", str(Path(engine_module.__file__).parent / "migrations")
        )
        with engine.sqlalchemy().connect() as conn:  # the downgrade: a generated column again
            config.attributes["connection"] = conn
            command.downgrade(config, "0012")
            conn.commit()
            assert conn.execute(text(stale)).scalar() == 0
            hits = (
                "SELECT path FROM memories WHERE search_vector @@ plainto_tsquery('simple', 'ibis')"
            )
            assert conn.execute(text(hits)).scalars().all() == ["/old.md"]
        engine.dispose()
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
