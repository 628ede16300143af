"""The schema in ``schema.py`` and the Alembic migrations must describe the same database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
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


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option(
        "script_location", str(Path(engine_module.__file__).parent / "migrations")
    )
    return config


def _downgrade(conn: Any, revision: str) -> None:
    """Run the migrations down to ``revision`` on ``conn`` and commit."""
    from alembic import command

    config = _alembic_config()
    config.attributes["connection"] = conn
    command.downgrade(config, revision)
    conn.commit()


def test_schema_revision_is_the_newest_migration() -> None:
    assert ScriptDirectory.from_config(_alembic_config()).get_current_head() == SCHEMA_REVISION


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
        behind = "SELECT COUNT(*) FROM memories WHERE search_head IS DISTINCT FROM head_version_id"
        with engine.sqlalchemy().connect() as conn:
            assert conn.execute(text(stale)).scalar() == 0
            assert conn.execute(text(behind)).scalar() == 0
        service = MemoryService(engine)
        service.search_trail.stop()  # the catch-ups are the searches' below
        assert [h.path for h in service.search("memstore_1", "heron")] == ["/old.md"]
        service.update_memory("memstore_1", "mem_1", content="now an ibis")
        with engine.sqlalchemy().connect() as conn:  # since 0015 the change is a version behind
            assert conn.execute(text(behind)).scalar() == 1
        assert service.search("memstore_1", "heron") == []
        assert [h.path for h in service.search("memstore_1", "ibis")] == ["/old.md"]
        assert service.check().problems == []
        service.close()
        with engine.sqlalchemy().connect() as conn:  # the downgrade: a generated column again
            _downgrade(conn, "0012")
            assert conn.execute(text(stale)).scalar() == 0
            hits = (
                "SELECT path FROM memories WHERE search_vector @@ plainto_tsquery('simple', 'ibis')"
            )
            assert conn.execute(text(hits)).scalars().all() == ["/old.md"]
        engine.dispose()
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def _a_history_at_0013(engine: Engine) -> dict[str, str]:
    """Two stores as 0013 keeps them: a memory made, changed, renamed and changed back; a
    version redacted; a memory deleted; the same text in both stores. Returns the texts."""
    import hashlib

    made = {"a1": "an old heron\n", "a2": "a new ibis\n", "b1": "a lone crane\n"}
    sha = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in made.items()}
    store = (
        "INSERT INTO memory_stores (id, name, description, created_at, updated_at, "
        "memory_count, revision, kind, owner, on_full, secrets, metadata) VALUES "
        "(:id, :id, '', 't', 't', :n, 0, 'memory', '', 'refuse', 'refuse', '{}')"
    )
    version = (
        "INSERT INTO memory_versions (id, store_id, memory_id, operation, path, content, "
        "content_sha256, size_bytes, created_at, actor) VALUES (:id, :store, :memory, :op, "
        ":path, :content, :sha, :size, :at, 'cli')"
    )
    memory = (
        "INSERT INTO memories (id, store_id, path, content, content_sha256, size_bytes, "
        "created_at, updated_at, head_version_id) VALUES (:id, :store, :path, :content, :sha, "
        ":size, 't', 't', :head)"
    )

    def v(vid: str, store: str, mem: str, op: str, path: str, key: str | None, at: str) -> dict:
        text_ = None if key is None else made[key]
        return {
            "id": vid, "store": store, "memory": mem, "op": op, "path": path, "content": text_,
            "sha": None if key is None else sha[key], "size": 0 if text_ is None else len(text_),
            "at": at,
        }  # fmt: skip

    with engine.sqlalchemy().begin() as conn:
        conn.execute(text(store), [{"id": "memstore_a", "n": 1}, {"id": "memstore_b", "n": 1}])
        rows = [
            v("memver_1", "memstore_a", "mem_a", "created", "/a.md", "a1", "t1"),
            v("memver_2", "memstore_a", "mem_a", "modified", "/a.md", "a2", "t2"),
            v("memver_3", "memstore_a", "mem_a", "renamed", "/b.md", "a2", "t3"),
            v("memver_4", "memstore_a", "mem_a", "modified", "/b.md", "a1", "t4"),
            v("memver_5", "memstore_a", "mem_x", "created", "/x.md", "b1", "t5"),
            v("memver_6", "memstore_a", "mem_x", "modified", "/x.md", "a2", "t6"),
            v("memver_7", "memstore_a", "mem_x", "deleted", "/x.md", None, "t7"),
            v("memver_8", "memstore_b", "mem_b", "created", "/a.md", "a1", "t8"),
        ]
        conn.execute(text(version), rows)
        conn.execute(  # memver_5 was redacted: no text, no hash
            text(
                "UPDATE memory_versions SET content = NULL, content_sha256 = NULL, "
                "redacted_at = 't9', redacted_by = 'cli' WHERE id = 'memver_5'"
            )
        )
        heads = [
            {
                "id": "mem_a",
                "store": "memstore_a",
                "path": "/b.md",
                "key": "a1",
                "head": "memver_4",
            },
            {
                "id": "mem_b",
                "store": "memstore_b",
                "path": "/a.md",
                "key": "a1",
                "head": "memver_8",
            },
        ]
        conn.execute(
            text(memory),
            [
                {**h, "content": made[h["key"]], "sha": sha[h["key"]], "size": len(made[h["key"]])}
                for h in heads
            ],
        )
    return made


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_0014_keeps_every_text_once_and_downgrades(tmp_path: Path, backend: str) -> None:
    """Every memory and version reads the same text after 0014, each text is kept once per
    store, search still finds what it found, ``db check`` is clean; the downgrade puts the
    texts back in their columns."""
    if backend == "sqlite":
        url, drop = f"sqlite:///{tmp_path / 'db.sqlite'}", None
    else:
        url, drop = _own_pg_database("contents")
    try:
        engine = make_engine(url, check_schema=False)
        upgrade(engine, "0013")
        made = _a_history_at_0013(engine)
        upgrade(engine)
        service = MemoryService(engine)
        a = "memstore_a"
        assert service.get_memory(a, "mem_a").content == made["a1"]
        expected = {
            "memver_1": made["a1"], "memver_2": made["a2"], "memver_3": made["a2"],
            "memver_4": made["a1"], "memver_5": None, "memver_6": made["a2"], "memver_7": None,
        }  # fmt: skip
        assert {v: service.get_version(a, v).content for v in expected} == expected
        assert service.get_version("memstore_b", "memver_8").content == made["a1"]
        with engine.sqlalchemy().connect() as conn:
            kept = conn.execute(text("SELECT store_id, content FROM contents")).all()
        assert sorted(kept) == sorted(
            [("memstore_a", made["a1"]), ("memstore_a", made["a2"]), ("memstore_b", made["a1"])]
        )  # the redacted crane is nowhere
        assert [h.path for h in service.search(a, "heron")] == ["/b.md"]
        assert service.search(a, "ibis") == []
        service.update_memory(a, "mem_a", content="now an egret\n")
        assert service.search(a, "heron") == []
        assert [h.path for h in service.search(a, "egret")] == ["/b.md"]
        assert service.check().problems == []
        service.close()
        with engine.sqlalchemy().connect() as conn:
            _downgrade(conn, "0013")
            back = conn.execute(text("SELECT id, content FROM memory_versions ORDER BY seq")).all()
            assert dict(back) == {**expected, "memver_8": made["a1"], back[-1][0]: "now an egret\n"}
            assert conn.execute(
                text("SELECT content FROM memories ORDER BY id")
            ).scalars().all() == [
                "now an egret\n",
                made["a1"],
            ]
        engine.dispose()
    finally:
        if drop is not None:
            drop()


@pytest.mark.postgres
def test_0015_saves_leave_the_vector_and_searches_skip_it(tmp_path: Path) -> None:
    """0015 (PostgreSQL): the vectors the trigger had emptied are made by the upgrade and each
    store is marked as taken in; after it a save leaves its row's vector as it was (a HOT
    update: no index holds what a save changes), a search never matches a vector made from
    another version than the row's head, and a catch-up brings it up. The downgrade brings
    the trigger back, with the rows behind emptied as it would have left them."""
    from .pgstat import number

    url, drop = _own_pg_database("marks")
    try:
        engine = make_engine(url, check_schema=False)
        upgrade(engine, "0013")
        _a_history_at_0013(engine)
        upgrade(engine, "0014")  # rows inserted as they were: no vectors yet
        upgrade(engine)
        sql = engine.sqlalchemy()
        with sql.connect() as conn:
            empty = "SELECT COUNT(*) FROM memories WHERE search_vector IS NULL"
            assert conn.execute(text(empty)).scalar() == 0
            marks = conn.execute(text("SELECT store_id, seq FROM search_marks")).all()
            last = conn.execute(
                text("SELECT store_id, MAX(seq) FROM memory_versions GROUP BY store_id")
            ).all()
        assert sorted(marks) == sorted(last)
        service = MemoryService(engine)
        service.search_trail.stop()  # the catch-ups are this test's
        a = "memstore_a"
        assert [h.path for h in service.search(a, "heron")] == ["/b.md"]
        conn = service.db._connection()

        def hot_updates() -> int:
            conn.execute("SELECT pg_stat_force_next_flush()")
            return number(
                conn, "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'memories'"
            )

        hot = hot_updates()
        service.update_memory(a, "mem_a", content="now an egret\n")
        assert hot_updates() == hot + 1
        real = service.catch_up_search
        service.catch_up_search = lambda **_: None  # type: ignore[method-assign]
        assert service.search(a, "heron") == []  # the vector is the heron's still
        assert service.search(a, "egret") == []
        service.catch_up_search = real  # type: ignore[method-assign]
        assert [h.path for h in service.search(a, "egret")] == ["/b.md"]
        service.update_memory(a, "mem_a", content="an egret again\n")
        service.catch_up_search = lambda **_: None  # type: ignore[method-assign]
        service.close()  # without catching up: mem_a is behind
        with sql.connect() as conn:
            _downgrade(conn, "0014")
            emptied = "SELECT id FROM memories WHERE search_vector IS NULL"
            assert conn.execute(text(emptied)).scalars().all() == ["mem_a"]
            trigger = "SELECT COUNT(*) FROM pg_trigger WHERE tgname = 'search_note_change'"
            assert conn.execute(text(trigger)).scalar() == 1
        engine.dispose()
    finally:
        drop()


def _own_pg_database(what: str) -> tuple[str, Any]:
    """A database of its own on the test server, and the function that drops it."""
    import psycopg

    from .conftest import pg_url

    url = pg_url()
    name = f"mnemofs_{what}_{os.getpid()}"
    admin = psycopg.connect(engine_module._libpq_uri(url), autocommit=True)
    admin.execute(f"DROP DATABASE IF EXISTS {name}")
    admin.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()

    return urlsplit(url)._replace(path=f"/{name}").geturl(), drop


def test_0016_the_search_index_merges_eight_segments_at_a_time(tmp_path: Path) -> None:
    """0016 (SQLite): FTS5 merges a level of the index once it holds eight segments, not
    four (its default); the setting is the index's own, kept across a rebuild, and the
    downgrade gives the default back. Searches find what they found."""

    def automerge(engine: Engine) -> Any:
        with engine.sqlalchemy().connect() as conn:
            return conn.execute(
                text("SELECT v FROM memories_fts_config WHERE k = 'automerge'")
            ).scalar()

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = make_engine(url, check_schema=False)
    upgrade(engine, "0015")
    assert automerge(engine) is None  # FTS5's default, 4
    upgrade(engine)
    assert automerge(engine) == 8
    service = MemoryService(engine)
    store = service.create_store("Birds", "").id
    for i in range(30):  # more segments than a level holds: batches of one, merged by eight
        service.create_memory(store, f"/b{i}.md", f"a heron, number {i}")
        service.catch_up_search()
    assert len(service.search(store, "heron", limit=50)) == 30
    assert service.check().problems == []
    service.close()
    with engine.sqlalchemy().begin() as conn:
        conn.execute(text("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')"))
    assert automerge(engine) == 8
    with engine.sqlalchemy().connect() as conn:
        _downgrade(conn, "0015")
    assert automerge(engine) == 4
    engine.dispose()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_0017_counts_the_directories_stores_keep(tmp_path: Path, backend: str) -> None:
    """0017 counts each store's directories into its row, triggers keep the count from then
    on (mkdir's limit reads it), and the downgrade takes the column and the triggers away."""
    if backend == "sqlite":
        url, drop = f"sqlite:///{tmp_path / 'db.sqlite'}", None
    else:
        url, drop = _own_pg_database("directories")
    try:
        engine = make_engine(url, check_schema=False)
        upgrade(engine, "0016")
        with engine.sqlalchemy().begin() as conn:
            for store, paths in (("memstore_a", ["/x/", "/x/y/", "/z/"]), ("memstore_b", [])):
                conn.execute(
                    text(
                        "INSERT INTO memory_stores (id, name, description, created_at, "
                        "updated_at, memory_count, revision) VALUES (:id, :id, '', 't', 't', 0, 0)"
                    ),
                    {"id": store},
                )
                for path in paths:
                    conn.execute(
                        text("INSERT INTO directories VALUES (:store, :path, 't')"),
                        {"store": store, "path": path},
                    )
        upgrade(engine)
        service = MemoryService(engine)
        assert service.store_usage("memstore_a")["directories"] == 3
        assert service.store_usage("memstore_b")["directories"] == 0
        service.make_directory("memstore_b", "/new")
        service.remove_directory("memstore_a", "/z")
        assert service.store_usage("memstore_a")["directories"] == 2
        assert service.store_usage("memstore_b")["directories"] == 1
        assert service.check().problems == []
        service.close()
        with engine.sqlalchemy().connect() as conn:
            _downgrade(conn, "0016")
            conn.execute(text("INSERT INTO directories VALUES ('memstore_b', '/more/', 't')"))
            conn.commit()
            columns = conn.execute(text("SELECT * FROM memory_stores")).keys()
            assert "directory_count" not in columns
        engine.dispose()
    finally:
        if drop is not None:
            drop()
