"""``.mnemofs/refusals`` and ``.mnemofs/changes`` in a real mount (issue 19): every refusal
explained, every change by others listed, a lost update named with where both versions are."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mnemofs.errors import NotFound
from mnemofs.store import Engine, MemoryService

from .mounted import errno_of, mounted, wait_for

pytestmark = pytest.mark.mounted
QUIET_S = 1.0  # a mount that saved is quiet again after this (SEARCH_QUIET_S, its looks)


@dataclass
class Env:
    service: MemoryService
    notes: str
    fixed: str
    root: Path
    db_url: str
    tmp: Path

    def report(self, kind: str) -> list[str]:
        return (self.root / ".mnemofs" / kind).read_text().splitlines()


@pytest.fixture
def env(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[Env]:
    service = MemoryService(engine, actor="api")
    notes = service.create_store("Notes").id
    fixed = service.create_store("Fixed").id
    service.create_memory(notes, "/todo.md", "one\n")
    service.create_memory(fixed, "/f.md", "fixed\n")
    session = service.create_session(
        [{"memory_store_id": notes}, {"memory_store_id": fixed, "access": "read_only"}],
        mount_root=str(tmp_path / "mnt"),
    )
    with mounted(db_url, session.id, tmp_path / "mnt"):
        yield Env(service, notes, fixed, tmp_path / "mnt", db_url, tmp_path)
    service.close()


def write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_hidden_and_read_only(env: Env) -> None:
    assert ".mnemofs" not in os.listdir(env.root)
    assert sorted(os.listdir(env.root / ".mnemofs")) == ["changes", "refusals"]
    assert env.report("refusals") == []
    assert errno_of(write, env.root / ".mnemofs" / "refusals", b"x") == errno.EROFS
    assert errno_of(os.unlink, env.root / ".mnemofs" / "changes") == errno.EROFS


def test_each_refusal_is_explained(env: Env) -> None:
    notes, fixed = env.root / "notes", env.root / "fixed"
    cases = [
        (write, (fixed / "new.md", b"x"), errno.EROFS, "fixed/new.md", "read_only"),
        (write, (notes / "big.md", b"x" * 102_401), errno.EFBIG, "notes/big.md", "100 KiB"),
        (write, (notes / "todo.md", b"\xff\xfe"), errno.EILSEQ, "notes/todo.md", "UTF-8"),
        (
            write,
            (notes / "keys.md", b"AKIAIOSFODNN7EXAMPLQ\n"),
            errno.EACCES,
            "notes/keys.md",
            "AWS Access Key on line 1",
        ),
        (os.rename, (notes / "todo.md", fixed / "todo.md"), errno.EROFS, "notes/todo.md", ""),
        (os.symlink, ("x", notes / "link"), errno.EPERM, "notes/link  symlink", "regular file"),
        (os.mkfifo, (notes / "fifo",), errno.EPERM, "notes/fifo  mknod", "regular file"),
        (os.mkdir, (notes / ".history" / "x",), errno.EROFS, "notes/.history/x", ".history"),
    ]
    for fn, args, code, where, words in cases:
        assert errno_of(fn, *args) == code, (fn.__name__, args)
        newest = env.report("refusals")[0]
        name = errno.errorcode[code]
        assert f"{where}" in newest, newest
        assert f": {name}: " in newest, newest
        assert words in newest, newest
        assert " -> " in newest, newest  # what to do instead
        assert "AKIAIOSFODNN7EXAMPLQ" not in newest  # never the credential itself
    # One line each, and two for the over-size file and for the bytes that are not text:
    # refused at the write and at its close.
    assert len(env.report("refusals")) == len(cases) + 2
    assert env.service.find_memory(env.notes, "/todo.md").content == "one\n"


def test_a_name_the_store_cannot_hold_is_explained(env: Env) -> None:
    """Such a name is refused at the lookup every create makes first (the mount never sees a
    create of it): the line names the file, its bad bytes escaped, and says what to do."""
    notes = os.fsencode(env.root / "notes")
    assert errno_of(write, os.path.join(notes, b"bad\xff.md"), b"x") == errno.EILSEQ
    newest = env.report("refusals")[0]
    assert "notes/bad\\xff.md  lookup: EILSEQ: " in newest, newest
    assert "not UTF-8" in newest, newest
    assert " -> " in newest, newest
    decomposed = "cafe\u0301.md"
    assert errno_of(os.mkdir, env.root / "notes" / decomposed) == errno.EILSEQ
    newest = env.report("refusals")[0]
    assert f"notes/{decomposed}  lookup: EILSEQ: " in newest, newest
    assert "NFC spells it 'caf\u00e9.md'" in newest, newest
    assert len(env.report("refusals")) == 2
    assert sorted(os.listdir(env.root / "notes")) == ["todo.md"]


def test_refusals_are_bounded(env: Env) -> None:
    for i in range(210):
        assert errno_of(write, env.root / "fixed" / f"n{i}.md", b"x") == errno.EROFS
    lines = env.report("refusals")
    assert len(lines) == 200
    assert "fixed/n209.md" in lines[0]  # newest first


def test_changes_by_others_are_listed(env: Env) -> None:
    memory = env.service.find_memory(env.notes, "/todo.md")
    env.service.update_memory(env.notes, memory.id, content="two\n")
    env.service.create_memory(env.notes, "/added.md", "by the API\n")
    assert wait_for(lambda: len(env.report("changes")) == 2, timeout=3.0)
    newest, older = env.report("changes")
    assert "notes/added.md  created  by api" in newest
    assert "notes/todo.md  modified  by api" in older
    # The mount's own saves are not "others".
    (env.root / "notes" / "mine.md").write_text("mine\n")
    assert len(env.report("changes")) == 2


def test_a_lost_update_is_named(env: Env) -> None:
    """Two mounts of one store: A opens and writes, B saves the same file, A closes. A's save
    wins (last commit is the head), both versions are kept, and A is told where."""
    other = env.service.create_session([{"memory_store_id": env.notes}])
    with mounted(env.db_url, other.id, env.tmp / "b"):
        fd = os.open(env.root / "notes" / "todo.md", os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, b"from A\n")
            (env.tmp / "b" / "notes" / "todo.md").write_text("from B\n")
            assert wait_for(lambda: any("by session" in line for line in env.report("changes")))
        finally:
            os.close(fd)
    lines = env.report("changes")
    notice = next(line for line in lines if "LOST UPDATE?" in line)
    assert f"by session {other.id}" not in notice  # the notice itself names them as "session"
    assert f"session {other.id}" in notice
    assert "notes/.history/todo.md/0002-modified-" in notice  # theirs
    assert "notes/.history/todo.md/0003-modified-" in notice  # yours
    assert env.service.find_memory(env.notes, "/todo.md").content == "from A\n"
    history = env.root / "notes" / ".history" / "todo.md"
    contents = [(history / n).read_text() for n in sorted(os.listdir(history))]
    assert contents == ["one\n", "from B\n", "from A\n"]


def test_a_close_that_replaced_nothing_names_no_lost_update(env: Env) -> None:
    """Descriptors open while another writer saves the file, whose close saves nothing over
    it: one that only read, one opened for writing that wrote nothing, one that wrote the very
    bytes the other saved (no version). Each close was named a lost update, "both kept", the
    two names the same version."""
    todo, memory = env.root / "notes" / "todo.md", env.service.find_memory(env.notes, "/todo.md")
    texts = iter(["two\n", "three\n", "same\n"])

    def saved_elsewhere_while_open(fd: int) -> None:
        heard = len(env.report("changes")) + 1
        env.service.update_memory(env.notes, memory.id, content=next(texts))
        assert wait_for(lambda: len(env.report("changes")) == heard, timeout=3.0)
        os.close(fd)

    reader = os.open(todo, os.O_RDONLY)
    assert os.read(reader, 100) == b"one\n"
    saved_elsewhere_while_open(reader)
    saved_elsewhere_while_open(os.open(todo, os.O_RDWR))
    writer = os.open(todo, os.O_WRONLY | os.O_TRUNC)
    os.write(writer, b"same\n")
    saved_elsewhere_while_open(writer)
    assert not [line for line in env.report("changes") if "LOST UPDATE?" in line]
    assert len(list(env.service.list_versions(env.notes, memory_id=memory.id))) == 4
    assert todo.read_text() == "same\n"


def test_a_save_of_the_bytes_it_opened_with_is_still_a_save(env: Env) -> None:
    """A descriptor writes back the very bytes the file held at its open while another writer
    saves other bytes: its close is the last commit, so the file holds its bytes again, and
    the lost update is named. The mount compared them with the version it showed before the
    other save, found them the same and saved nothing: close answered 0, the others' stayed."""
    todo, memory = env.root / "notes" / "todo.md", env.service.find_memory(env.notes, "/todo.md")
    fd = os.open(todo, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"one\n")
        heard = len(env.report("changes")) + 1
        env.service.update_memory(env.notes, memory.id, content="two\n")
        assert wait_for(lambda: len(env.report("changes")) == heard, timeout=3.0)
    finally:
        os.close(fd)
    assert env.service.find_memory(env.notes, "/todo.md").content == "one\n"
    assert todo.read_text() == "one\n"
    assert "LOST UPDATE?" in env.report("changes")[0]


def test_what_a_save_evicted_leaves_the_mount(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """A create in a full ``evict-lru`` store, or in an evicting capacity pool (from another
    attached store), deletes the least recently accessed memory in its own transaction. The
    mount shows the create as it makes it; the eviction is shown within a second too, and
    listed. A local SQLite mount took every move since its last look as its own (nobody else
    had committed) and went on showing the evicted files, with their old content, for good."""
    service = MemoryService(engine, actor="api")
    cache = service.create_store("Cache", on_full="evict-lru", max_memories=2).id
    mine, theirs = service.create_store("Mine").id, service.create_store("Theirs").id
    pool = service.create_pool("agent", 1, on_full="evict-lru")
    service.set_pool([mine, theirs], pool.id)
    service.create_memory(theirs, "/old.md", "theirs, least recently accessed\n")
    root = tmp_path / "mnt"
    session = service.create_session(
        [{"memory_store_id": s} for s in (cache, mine, theirs)], mount_root=str(root)
    )
    try:
        with mounted(db_url, session.id, root):
            for name in ("a", "b"):
                (root / "cache" / f"{name}.md").write_text(f"{name}\n")
                time.sleep(0.01)  # accessed in turn
            # Each evicting create made once the mount is quiet (its looks done, the search
            # index caught up), so that nothing but the create commits before its look.
            time.sleep(QUIET_S)
            (root / "cache" / "c.md").write_text("c\n")  # the store is full: a.md goes
            assert wait_for(lambda: not (root / "cache" / "a.md").exists(), timeout=3.0)
            time.sleep(QUIET_S)
            (root / "mine" / "new.md").write_text("new\n")  # the pool holds one: old.md goes
            assert wait_for(lambda: not (root / "theirs" / "old.md").exists(), timeout=3.0)
            assert sorted(os.listdir(root / "cache")) == ["b.md", "c.md"]
            assert os.listdir(root / "mine") == ["new.md"]
            assert errno_of((root / "cache" / "a.md").read_text) == errno.ENOENT
            changes = (root / ".mnemofs" / "changes").read_text()
            assert "cache/a.md  deleted  by evict" in changes
            assert "theirs/old.md  deleted  by evict" in changes
        with pytest.raises(NotFound):
            service.find_memory(cache, "/a.md")
    finally:
        service.close()
