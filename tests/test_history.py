"""``.history/`` in a real mount (issue 19): hidden from listings, reachable by path, one
read-only file per version, restored by an ordinary copy."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mnemofs.store import Engine, MemoryService

from .mounted import errno_of, mounted, wait_for

pytestmark = pytest.mark.mounted


@dataclass
class Env:
    service: MemoryService
    store: str
    root: Path  # the store's directory in the mount
    ro: Path  # a read_only store's directory


@pytest.fixture
def env(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[Env]:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Notes").id
    todo = service.create_memory(store, "/notes/todo.md", "one\n")
    service.update_memory(store, todo.id, content="one\ntwo\n")
    old = service.update_memory(store, todo.id, content="secret-ish\n").memory_version_id
    service.update_memory(store, todo.id, content="one\ntwo\nthree\n")
    service.redact_version(store, old)
    gone = service.create_memory(store, "/gone.md", "soon deleted\n")
    service.delete_memory(store, gone.id)
    moved = service.create_memory(store, "/a.md", "moving\n")
    service.update_memory(store, moved.id, path="/b.md")
    ro = service.create_store("Fixed").id
    service.create_memory(ro, "/f.md", "fixed\n")
    session = service.create_session(
        [
            {"memory_store_id": store},
            {"memory_store_id": ro, "access": "read_only"},
        ],
        mount_root=str(tmp_path / "mnt"),
    )
    mnt = tmp_path / "mnt"
    with mounted(db_url, session.id, mnt):
        yield Env(service, store, mnt / "notes", mnt / "fixed")
    service.close()


def test_hidden_from_every_walk_reachable_by_path(env: Env) -> None:
    assert ".history" not in os.listdir(env.root)
    listing = subprocess.run(["ls", "-a", str(env.root)], capture_output=True, text=True).stdout
    assert ".history" not in listing
    found = subprocess.run(["find", str(env.root)], capture_output=True, text=True).stdout
    assert ".history" not in found
    grep = subprocess.run(["grep", "-r", "one", str(env.root)], capture_output=True, text=True)
    assert grep.stdout.splitlines() == [f"{env.root}/notes/todo.md:one"]
    assert (env.root / ".history").is_dir()
    assert sorted(os.listdir(env.root / ".history")) == ["b.md", "gone.md", "notes"]
    assert os.listdir(env.root / ".history" / "notes") == ["todo.md"]
    assert (env.ro / ".history" / "f.md").is_dir()  # every store has one


def test_one_file_per_version_oldest_first(env: Env) -> None:
    versions = env.root / ".history" / "notes" / "todo.md"
    names = sorted(os.listdir(versions))
    assert [n.split("-")[:2] for n in names] == [
        ["0001", "created"],
        ["0002", "modified"],
        ["0003", "redacted"],
        ["0004", "modified"],
    ]
    assert all(n.endswith("Z") and "T" in n for n in names)
    contents = [(versions / n).read_text() for n in names]
    assert contents == ["one\n", "one\ntwo\n", "", "one\ntwo\nthree\n"]
    assert [(versions / n).stat().st_size for n in names] == [4, 8, 0, 14]
    assert (versions / names[0]).stat().st_mode & 0o222 == 0
    # A deleted memory's history at its last path; a renamed one's at its new path.
    gone = sorted(os.listdir(env.root / ".history" / "gone.md"))
    assert [n.split("-")[1] for n in gone] == ["created", "deleted"]
    assert (env.root / ".history" / "gone.md" / gone[0]).read_text() == "soon deleted\n"
    moved = sorted(os.listdir(env.root / ".history" / "b.md"))
    assert [n.split("-")[1] for n in moved] == ["created", "renamed"]
    assert errno_of(os.stat, env.root / ".history" / "a.md") == errno.ENOENT


def test_restore_by_cp_is_one_version(env: Env) -> None:
    versions = env.root / ".history" / "notes" / "todo.md"
    first = sorted(os.listdir(versions))[0]
    before = len(list(env.service.list_versions(env.store)))
    subprocess.run(["cp", str(versions / first), str(env.root / "notes" / "todo.md")], check=True)
    assert (env.root / "notes" / "todo.md").read_text() == "one\n"
    after = list(env.service.list_versions(env.store))
    assert len(after) == before + 1
    assert env.service.find_memory(env.store, "/notes/todo.md").content == "one\n"
    # The new version shows in .history at once.
    assert wait_for(lambda: len(os.listdir(versions)) == 5)
    # A deleted memory comes back the same way.
    gone = sorted(os.listdir(env.root / ".history" / "gone.md"))[0]
    subprocess.run(["cp", str(env.root / ".history" / "gone.md" / gone), str(env.root)], check=True)
    assert (env.root / gone).read_text() == "soon deleted\n"


def test_everything_under_history_is_read_only(env: Env) -> None:
    history = env.root / ".history"
    version = history / "notes" / "todo.md" / sorted(os.listdir(history / "notes" / "todo.md"))[0]
    attempts = [
        (os.open, version, os.O_WRONLY),
        (os.open, version, os.O_RDWR | os.O_TRUNC),
        (os.open, history / "new.md", os.O_WRONLY | os.O_CREAT),
        (os.unlink, version),
        (os.mkdir, history / "d"),
        (os.rmdir, history / "notes"),
        (os.rename, version, history / "x"),
        (os.rename, env.root / "b.md", history / "b2.md"),
        (os.truncate, version, 0),
        (os.chmod, version, 0o644),
        (os.symlink, "x", history / "link"),
        (os.rmdir, history),
        (os.rename, history, env.root / "hist"),
        (os.mkdir, env.root / ".history"),
    ]
    for fn, *args in attempts:
        code = errno_of(fn, *args)
        expected = errno.EEXIST if fn is os.mkdir and args[0] == history else errno.EROFS
        assert code == expected, (fn.__name__, args, errno.errorcode.get(code))
    # A file over the directory: the kernel's own answer, before asking the mount.
    assert errno_of(os.rename, env.root / "b.md", history) == errno.EISDIR
    assert len(os.listdir(history / "notes" / "todo.md")) == 4
    assert (env.root / "b.md").read_text() == "moving\n"


def test_memories_named_like_the_history_do_not_hide_it(env: Env) -> None:
    """A memory at /.history/... (the API, the CLI or a synced folder can make one) makes a
    directory of that name in the store; the mount neither lists it nor lets it stand in for
    the history, which stays read-only."""
    env.service.create_memory(env.store, "/.history/made-elsewhere.md", "not a version\n")
    env.service.create_memory(env.store, "/seen.md", "after it\n")
    assert wait_for(lambda: (env.root / "seen.md").exists())
    assert ".history" not in os.listdir(env.root)
    listing = subprocess.run(["ls", "-a", str(env.root)], capture_output=True, text=True).stdout
    assert ".history" not in listing.split()
    history = env.root / ".history"
    assert sorted(os.listdir(history)) == [".history", "b.md", "gone.md", "notes", "seen.md"]
    assert os.listdir(history / "notes") == ["todo.md"]
    made = history / ".history" / "made-elsewhere.md"
    assert [(made / n).read_text() for n in os.listdir(made)] == ["not a version\n"]
    assert errno_of(os.open, history / "new.md", os.O_WRONLY | os.O_CREAT) == errno.EROFS
    assert env.service.find_memory(env.store, "/.history/made-elsewhere.md").content == (
        "not a version\n"
    )


def test_a_store_restore_shows_in_the_mount(env: Env) -> None:
    todo = env.root / "notes" / "todo.md"
    at = env.service.find_memory(env.store, "/notes/todo.md").updated_at
    time.sleep(0.002)
    todo.write_text("a bad edit\n")
    (env.root / "notes" / "extra.md").write_text("made after\n")
    steps = env.service.restore_store(env.store, at)
    # Back to before the fixture made /gone.md and /b.md: those go too.
    assert sorted((s.action, s.path) for s in steps) == [
        ("delete", "/b.md"),
        ("delete", "/notes/extra.md"),
        ("modify", "/notes/todo.md"),
    ]
    # The mount hears of it like any change made elsewhere (the spec: within a second).
    assert wait_for(lambda: todo.read_text() == "one\ntwo\nthree\n", timeout=1.5)
    assert wait_for(lambda: not (env.root / "notes" / "extra.md").exists(), timeout=1.5)
    assert not (env.root / "b.md").exists()
