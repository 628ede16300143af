"""A folder of notes into a store and heads out to a folder (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from mnemofs import limits
from mnemofs.cli.folders import _folder, folder_files
from mnemofs.store import MemoryService


def notes(root: Path) -> Path:
    """A folder like the ones people have: notes, a subfolder, an empty folder, an image, a
    big file, a hidden folder, a credential, a name in another Unicode spelling, a link out."""
    vault = root / "vault"
    (vault / "projects" / "deep").mkdir(parents=True)
    (vault / "empty" / "leaf").mkdir(parents=True)
    (vault / ".obsidian").mkdir()
    (vault / "todo.md").write_text("- buy milk\n")
    (vault / "projects" / "deep" / "plan.md").write_text("step 1\n")
    (vault / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (vault / "big.txt").write_text("a" * (limits.MAX_CONTENT_BYTES + 1))
    (vault / ".obsidian" / "app.json").write_text("{}")
    (vault / "keys.md").write_text("aws AKIAIOSFODNN7EXAMPLQ\n")
    (vault / unicodedata.normalize("NFD", "café.md")).write_text("au lait")
    outside = root / "outside.md"
    outside.write_text("not yours")
    (vault / "link.md").symlink_to(outside)
    return vault


def run_import(service: MemoryService, store_id: str, vault: Path, **kw: object) -> dict[str, str]:
    folder = _folder(str(vault))
    prefix = str(kw.pop("prefix", "/"))
    hidden = bool(kw.pop("include_hidden", False))
    outcomes = service.import_files(
        store_id, lambda: folder_files(folder, prefix, include_hidden=hidden), **kw
    )
    return {o.path: o.verdict + (f": {o.reason}" if o.reason else "") for o in outcomes}


def test_import_then_again(service: MemoryService, store_id: str, tmp_path: Path) -> None:
    vault = notes(tmp_path)
    first = run_import(service, store_id, vault, prefix="/notes/")
    assert first["/notes/todo.md"] == "created"
    assert first["/notes/projects/deep/plan.md"] == "created"
    assert first["/notes/empty/leaf/"] == "created"
    assert first["/notes/photo.png"].startswith("skipped: content is not valid UTF-8")
    assert first["/notes/big.txt"].startswith("skipped: 102,401 bytes, over the limit")
    assert first["/notes/.obsidian"].startswith("skipped: hidden")
    assert "AWS Access Key on line 1" in first["/notes/keys.md"]
    assert "AKIA" not in first["/notes/keys.md"]  # the credential itself is never repeated
    assert "Normalization Form C" in first[unicodedata.normalize("NFD", "/notes/café.md")]
    assert first["/notes/link.md"].startswith("skipped: a symbolic link")
    stored = {m.path for m in service.list_memories(store_id, limit=100)}
    assert stored == {"/notes/todo.md", "/notes/projects/deep/plan.md"}
    assert service.find_memory(store_id, "/notes/todo.md").content == "- buy milk\n"
    assert [p.path for p in service.list_memories(store_id, path_prefix="/notes/empty/", depth=1)]

    (vault / "todo.md").write_text("- buy milk\n- and bread\n")
    again = run_import(service, store_id, vault, prefix="/notes/")
    assert again["/notes/todo.md"] == "modified"
    assert again["/notes/projects/deep/plan.md"] == "unchanged"
    assert again["/notes/empty/leaf/"] == "unchanged"
    todo = service.find_memory(store_id, "/notes/todo.md")
    versions = list(service.list_versions(store_id, memory_id=todo.id))
    assert [v.operation for v in versions] == ["modified", "created"]
    assert service.check().ok


def test_hidden_files_when_asked(service: MemoryService, store_id: str, tmp_path: Path) -> None:
    vault = notes(tmp_path)
    done = run_import(service, store_id, vault, include_hidden=True)
    assert done["/.obsidian/app.json"] == "created"


def test_dry_run_writes_nothing(service: MemoryService, store_id: str, tmp_path: Path) -> None:
    vault = notes(tmp_path)
    plan = run_import(service, store_id, vault, dry_run=True)
    assert plan["/todo.md"] == "created"
    assert list(service.list_memories(store_id)) == []
    assert service.get_store(store_id).memory_count == 0
    assert list(service.list_versions(store_id)) == []


def test_full_store_and_conflicts_are_skipped(
    service: MemoryService, store_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = tmp_path / "v"
    (vault / "a").mkdir(parents=True)
    (vault / "a" / "one.md").write_text("1")
    for name in ("b.md", "c.md", "d.md"):
        (vault / name).write_text(name)
    service.create_memory(store_id, "/a", "a file where the folder has a directory")
    monkeypatch.setattr(limits, "MAX_MEMORIES_PER_STORE", 3)
    done = run_import(service, store_id, vault)
    assert done["/a/one.md"].startswith("skipped: '/a' is a memory")
    assert done["/b.md"] == "created"
    assert done["/c.md"] == "created"
    assert done["/d.md"] == "skipped: the store is full (3 memories)"
    assert service.get_store(store_id).memory_count == 3


def mnemofs(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemofs", "--db", str(db), *args], capture_output=True, text=True
    )


def test_cli_import_and_export(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    vault = notes(tmp_path)
    assert mnemofs(db, "stores", "create", "Vault").returncode == 0
    done = mnemofs(db, "memories", "import", "Vault", str(vault), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "3 created, 0 modified, 0 unchanged, 6 skipped (dry run: nothing was written)"
    )
    done = mnemofs(db, "--json", "memories", "import", "Vault", str(vault), "--prefix", "/v")
    report = json.loads(done.stdout)
    assert (report["created"], report["skipped"]) == (3, 6)
    skipped = {d["path"]: d["reason"] for d in report["data"] if d["verdict"] == "skipped"}
    assert "/v/photo.png" in skipped

    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "projects").symlink_to(elsewhere)  # planted: must not be written through
    done = mnemofs(db, "memories", "export", "Vault", str(out), "--path-prefix", "/v/")
    assert done.returncode == 1
    assert "skipped   /v/projects/deep/plan.md" in done.stdout
    assert (out / "todo.md").read_text() == "- buy milk\n"
    assert (out / "todo.md").stat().st_mode & 0o777 == 0o600
    assert list(elsewhere.iterdir()) == []
    os.unlink(out / "projects")
    done = mnemofs(db, "memories", "export", "Vault", str(out), "--path-prefix", "/v/")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "projects" / "deep" / "plan.md").read_text() == "step 1\n"
