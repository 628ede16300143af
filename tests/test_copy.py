"""`mnemofs db copy` (issue 18): a whole workspace from SQLite into PostgreSQL, verified,
resumable, and served from its new home."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mnemofs.errors import Conflict, InvalidRequest
from mnemofs.store import MemoryService, make_engine
from mnemofs.store import copy as copying

from .conftest import _fresh_pg_engine, pg_url
from .mounted import mounted
from .test_transfer import make_history, state


def workspace(path: Path) -> tuple[MemoryService, dict[str, str]]:
    """A SQLite workspace with history, a session, its token and an API key."""
    service = MemoryService(make_engine(f"sqlite:///{path}"), actor="api")
    sid = make_history(service)
    other = service.create_store("Journal", kind="journal").id
    service.append_journal(other, '{"turn": 1}\n')
    for name in ("a", "b", "c", "d", "e"):  # pages of composite keys (store_id, path)
        service.make_directory(sid, f"/dirs/{name}")
    session = service.create_session([{"memory_store_id": sid}], mount_root="/mnt/x")
    for _ in range(3):  # (session_id, position) keys over several pages
        service.create_session(
            [{"memory_store_id": sid}, {"memory_store_id": other}], mount_root="/mnt/y"
        )
    token = service.create_session_token(session.id).token
    key = service.create_api_key("admin").key
    return service, {"store": sid, "session": session.id, "token": token, "key": key}


@pytest.mark.postgres
def test_sqlite_to_postgres_is_exact_and_keeps_credentials(tmp_path: Path) -> None:
    source, names = workspace(tmp_path / "a.db")
    _fresh_pg_engine()
    target = MemoryService(make_engine(pg_url()), actor="api")
    try:
        report = copying.copy_workspace(source, target)
        assert report.rows["memory_versions"] == report.copied["memory_versions"] == 9
        sid = names["store"]
        assert state(target, sid, ids=True) == state(source, sid, ids=True)
        assert target.authenticate(names["token"]) is not None  # tokens work in the new home
        assert target.authenticate(names["key"]) is not None
        assert [s.id for s in target.list_stores()] == [s.id for s in source.list_stores()]
        # Again: nothing new, still verified.
        again = copying.copy_workspace(source, target)
        assert sum(again.copied.values()) == 0
        # New versions after the copy continue the sequence (no clash with copied seqs).
        memory = target.find_memory(sid, "/notes/a.md")
        target.update_memory(sid, memory.id, content="after the move")
        assert target.check().ok
        assert target.search(sid, "move")
        # A target that moved on since is not taken for a finished copy (its new text is the
        # first difference: texts are copied before the rows that name them).
        with pytest.raises(Conflict, match="contents: the source has 6 rows, the target 7"):
            copying.copy_workspace(source, target)
    finally:
        source.close()
        target.close()


def test_an_interrupted_copy_finishes_on_a_second_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, names = workspace(tmp_path / "a.db")
    target = MemoryService(make_engine(f"sqlite:///{tmp_path / 'b.db'}"), actor="api")
    monkeypatch.setattr(copying, "PAGE", 3)

    def cut(table: str, done: int, total: int) -> None:
        if table == "memory_versions" and done >= 3:
            raise KeyboardInterrupt  # the admin's ^C, halfway through the versions

    try:
        with pytest.raises(KeyboardInterrupt):
            copying.copy_workspace(source, target, cut)
        half = target.db.run(
            lambda tx: tx.scalar("SELECT COUNT(*) FROM memory_versions"), write=False
        )
        assert 0 < half < 9
        report = copying.copy_workspace(source, target)
        assert report.copied["memory_versions"] == 9 - half
        sid = names["store"]
        assert state(target, sid, ids=True) == state(source, sid, ids=True)
        assert target.check().ok
    finally:
        source.close()
        target.close()


def test_a_target_with_other_data_is_refused(tmp_path: Path) -> None:
    source, _ = workspace(tmp_path / "a.db")
    target = MemoryService(make_engine(f"sqlite:///{tmp_path / 'b.db'}"), actor="api")
    target.create_store("Mine")
    try:
        with pytest.raises(InvalidRequest, match="already holds memory_stores row"):
            copying.copy_workspace(source, target)
        assert [s.name for s in target.list_stores()] == ["Mine"]
        with pytest.raises(InvalidRequest, match="the same database"):
            copying.copy_workspace(source, source)
    finally:
        source.close()
        target.close()


@pytest.mark.postgres
@pytest.mark.mounted
def test_cli_copy_then_mount_the_target(tmp_path: Path) -> None:
    source, names = workspace(tmp_path / "a.db")
    source.close()
    _fresh_pg_engine()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemofs",
            "--db",
            str(tmp_path / "a.db"),
            "--json",
            "db",
            "copy",
            "--to",
            pg_url(),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verified"] is True
    assert "password" not in done.stdout + done.stderr
    root = tmp_path / "mnt"
    with mounted(pg_url(), names["session"], root):
        slug = next(root.iterdir())
        assert (slug / "notes" / "a.md").read_text() == "first\nsecond\n"
        assert (slug / "archive" / "b.md").read_text() == "bee ünïcode ✓\n"
        (slug / "notes" / "new.md").write_text("saved in the new home\n")
    target = MemoryService(make_engine(pg_url()), actor="api")
    try:
        assert target.find_memory(names["store"], "/notes/new.md").content == (
            "saved in the new home\n"
        )
        assert target.check().ok
    finally:
        target.close()


def test_a_target_that_differs_is_not_taken_for_a_copy(tmp_path: Path) -> None:
    """Counts alike but a version's hash changed in the target: the digests tell."""
    source, _ = workspace(tmp_path / "a.db")
    target = MemoryService(make_engine(f"sqlite:///{tmp_path / 'b.db'}"), actor="api")
    try:
        copying.copy_workspace(source, target)
        target.db.run(
            lambda tx: tx.run(
                "UPDATE memory_versions SET content_sha256 = :h WHERE seq = 1", {"h": "0" * 64}
            ),
            write=True,
        )
        with pytest.raises(Conflict, match="memory_versions: the target's rows differ"):
            copying.copy_workspace(source, target)
    finally:
        source.close()
        target.close()
