"""The schema in ``schema.py`` and the Alembic migrations must describe the same database."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

import mnemofs.store.engine as engine_module
from mnemofs.store import Engine, make_engine, upgrade
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
