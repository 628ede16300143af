"""Everything mnemofs creates is owner-only, whatever the umask (issue 12): the database and
its -wal/-shm, the data directory, mount records and logs, the sync worker's state, folders
and copies. Logs never carry content."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .mounted import require_fuse

MARKER = "content-marker-7f3a9"


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mnemofs", *args], env=env, umask=0, capture_output=True, text=True
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MNEMOFS_DB"}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env


def test_database_and_its_wal_are_owner_only_under_umask_0(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    db = tmp_path / "new" / "dir" / "m.db"
    cli(env, "--db", str(db), "stores", "create", "S")
    assert mode(db) == "0o600"
    assert mode(db.parent) == mode(db.parent.parent) == "0o700"
    conn = sqlite3.connect(db)  # another process keeps the WAL open while one writes
    conn.execute("PRAGMA journal_mode = WAL")
    cli(env, "--db", str(db), "memories", "create", "S", "/a.md", "--content", MARKER)
    assert mode(Path(f"{db}-wal")) == mode(Path(f"{db}-shm")) == "0o600"
    conn.close()


def test_the_default_data_directory_is_tightened_once(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    home = tmp_path / "data" / "mnemofs"
    home.mkdir(parents=True)
    home.chmod(0o755)  # made by an older mnemofs, or by hand
    first = cli(env, "stores", "list")
    assert mode(home) == "0o700"
    assert mode(home / "mnemofs.db") == "0o600"
    assert f"made {home} owner-only (it was 755)" in first.stderr
    assert "owner-only" not in cli(env, "stores", "list").stderr  # said once


@pytest.mark.mounted
def test_mount_records_logs_and_sync_files_are_owner_only(tmp_path: Path) -> None:
    require_fuse()
    env = clean_env(tmp_path)
    db = str(tmp_path / "m.db")
    store = json.loads(cli(env, "--db", db, "--json", "stores", "create", "Notes").stdout)["id"]
    docs = json.loads(cli(env, "--db", db, "--json", "stores", "create", "Docs").stdout)["id"]
    cli(env, "--db", db, "memories", "create", "Notes", "/d/a.md", "--content", MARKER)
    cli(env, "--db", db, "memories", "create", "Docs", "/r.md", "--content", MARKER)
    root = tmp_path / "mnt"
    root.mkdir()
    cli(env, "--db", db, "mount", "--attach", store, "--root", str(root))
    try:
        assert (root / "notes" / "d" / "a.md").read_text() == MARKER
        records = list((tmp_path / "state" / "mnemofs" / "mounts").iterdir())
        assert {p.suffix for p in records} == {".json", ".log"}
        for path in records:
            assert mode(path) == "0o600", path
        assert mode(records[0].parent) == "0o700"
    finally:
        cli(env, "--db", db, "umount", "--root", str(root), check=False)
        subprocess.run(["fusermount3", "-u", "-z", str(root)], capture_output=True, check=False)
    folder = tmp_path / "synced"
    cli(
        env,
        "--db",
        db,
        "sync",
        "--attach",
        store,
        "--attach",
        f"{docs}:read_only",
        "--root",
        str(folder),
        "--once",
    )
    assert mode(folder) == mode(folder / "notes") == mode(folder / "notes" / "d") == "0o700"
    assert mode(folder / "notes" / "d" / "a.md") == "0o600"
    assert mode(folder / "docs" / "r.md") == "0o400"
    assert mode(tmp_path / ".synced.mnemofs-sync.json") == "0o600"
    logs = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert logs
    for path in logs:
        assert MARKER not in path.read_text(errors="replace"), path
