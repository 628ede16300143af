"""Store operations a filesystem needs: rename over a target, directory moves, the change feed."""

from __future__ import annotations

import select
import threading
from pathlib import Path
from typing import Any

import pytest

from mnemofs import errors, limits
from mnemofs.inotify import FileWatch
from mnemofs.models import Memory
from mnemofs.store import MemoryService, make_engine
from mnemofs.store.folders import FileIn

from .mounted import wait_for


def tree(service: MemoryService, store_id: str) -> dict[str, str | None]:
    return {
        m.path: service.get_memory(store_id, m.id).content
        for m in service.list_memories(store_id)
        if isinstance(m, Memory)
    }


def test_rename_over_keeps_the_target_id(service: MemoryService, store_id: str) -> None:
    target = service.create_memory(store_id, "/notes/todo.md", "old")
    source = service.create_memory(store_id, "/tmp/new.md", "new")
    result = service.rename_over(store_id, source.id, target.id, actor="sess_x")
    assert (result.id, result.path, result.content) == (target.id, "/notes/todo.md", "new")
    assert tree(service, store_id) == {"/notes/todo.md": "new"}
    assert [v.operation for v in service.list_versions(store_id, memory_id=target.id)] == [
        "modified",
        "created",
    ]
    assert [v.operation for v in service.list_versions(store_id, memory_id=source.id)] == [
        "deleted",
        "created",
    ]
    # The source's directory stays, as a filesystem's does.
    assert [e.path for e in service.list_memories(store_id, depth=1)] == ["/notes/", "/tmp/"]
    assert service.get_store(store_id).memory_count == 1


def test_move_directory(service: MemoryService, store_id: str) -> None:
    service.create_memory(store_id, "/a/x.md", "x")
    service.create_memory(store_id, "/a/sub/y.md", "y")
    service.make_directory(store_id, "/a/empty")
    service.create_memory(store_id, "/keep.md", "k")
    assert service.move_directory(store_id, "/a", "/b/c", actor="sess_x") == 2
    assert tree(service, store_id) == {"/b/c/x.md": "x", "/b/c/sub/y.md": "y", "/keep.md": "k"}
    assert [e.path for e in service.list_memories(store_id, path_prefix="/b/c/", depth=1)] == [
        "/b/c/empty/",
        "/b/c/sub/",
        "/b/c/x.md",
    ]
    ops = [
        (v.operation, v.path, v.created_by.stored)
        for v in service.list_versions(store_id, limit=2).data
    ]
    assert ops == [("modified", "/b/c/x.md", "sess_x"), ("modified", "/b/c/sub/y.md", "sess_x")]
    # Onto an empty directory: replaced. Onto a non-empty one, a file, or into itself: refused.
    service.make_directory(store_id, "/target")
    service.move_directory(store_id, "/b/c", "/target")
    assert "/target/x.md" in tree(service, store_id)
    service.create_memory(store_id, "/other/z.md", "z")
    with pytest.raises(errors.Conflict, match="not empty"):
        service.move_directory(store_id, "/other", "/target")
    with pytest.raises(errors.Conflict, match="'/keep.md' is a memory"):
        service.move_directory(store_id, "/other", "/keep.md")
    with pytest.raises(errors.InvalidRequest, match="into itself"):
        service.move_directory(store_id, "/other", "/other/deeper")
    with pytest.raises(errors.NotFound):
        service.move_directory(store_id, "/missing", "/elsewhere")


def test_snapshot_and_change_feed(service: MemoryService, store_id: str) -> None:
    a = service.create_memory(store_id, "/a.md", "a")
    service.make_directory(store_id, "/d")
    snap = service.snapshot(store_id)
    assert [m.path for m in snap.memories] == ["/a.md"]
    assert snap.memories[0].content is None
    assert snap.directories == ("/d/",)
    states = service.store_states([store_id, "memstore_gone"])
    assert list(states) == [store_id]
    assert states[store_id].revision == snap.revision
    service.update_memory(store_id, a.id, content="a2", actor="cli")
    service.delete_memory(store_id, a.id)
    feed = service.changes(store_id, snap.last_seq)
    assert [(c.version.operation, c.version.created_by.stored) for c in feed] == [
        ("modified", "cli"),
        ("deleted", "api"),
    ]
    assert feed[0].seq < feed[1].seq
    assert service.changes(store_id, feed[-1].seq) == []
    assert service.store_states([store_id])[store_id].revision > snap.revision


def test_memories_fetched_by_id(service: MemoryService, store_id: str) -> None:
    """A catch-up's reads in one: the memories still there, full, by id; the rest left out;
    more ids than one query takes; a store that is not there refused."""
    made = [service.create_memory(store_id, f"/n/{i}.md", f"note {i}") for i in range(3)]
    gone = service.create_memory(store_id, "/gone.md", "gone")
    service.delete_memory(store_id, gone.id)
    other = service.create_store("Other").id
    theirs = service.create_memory(other, "/theirs.md", "theirs")
    service.update_memory(store_id, made[1].id, content="note 1, edited")
    ids = [m.id for m in made]
    found = service.get_memories(store_id, [*ids, gone.id, theirs.id, "mem_nothing", ids[0]])
    assert sorted(found) == sorted(ids)
    assert found[made[1].id] == service.get_memory(store_id, made[1].id, count_access=False)
    assert found[made[1].id].content == "note 1, edited"
    many = [f"mem_{i:026d}" for i in range(1200)] + [ids[2]]  # three queries' worth of ids
    assert list(service.get_memories(store_id, many)) == [ids[2]]
    assert service.get_memories(store_id, []) == {}
    assert service.get_memories(other, ids) == {}
    with pytest.raises(errors.NotFound):
        service.get_memories("memstore_nothing", ids)


def test_a_change_made_while_a_snapshot_is_read_is_in_it_or_after_it(
    service: MemoryService, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mount or a sync worker starts from ``snapshot``: the tree and the position in the
    change feed must be one moment, or a memory made between the two is in neither (found by
    the PostgreSQL soak: the sync worker never had the CLI's first file)."""
    from mnemofs.store import tx as txmod

    other = MemoryService(service.engine, actor="cli")
    original = txmod.Tx.all
    made: list[str] = []

    def all_then_a_commit_elsewhere(self: txmod.Tx, sql: str, params: object = None) -> object:
        rows = original(self, sql, params)  # type: ignore[arg-type]
        if "FROM memories WHERE store_id" in sql and not made:
            made.append("")  # once
            elsewhere = threading.Thread(  # its own connection, as another process's
                target=lambda: made.append(other.create_memory(store_id, "/m.md", "meanwhile").id)
            )
            elsewhere.start()
            elsewhere.join()
        return rows

    monkeypatch.setattr(txmod.Tx, "all", all_then_a_commit_elsewhere)
    snap = service.snapshot(store_id)
    monkeypatch.undo()
    other.close()
    assert len(made) == 2  # the commit came between the tree and the position
    in_tree = [m.id for m in snap.memories]
    in_feed = [c.version.memory_id for c in service.changes(store_id, snap.last_seq)]
    assert (made[1] in in_tree) != (made[1] in in_feed)


def test_rename_over_folds_a_fresh_temporary(service: MemoryService, store_id: str) -> None:
    target = service.create_memory(store_id, "/a.md", "old")
    before = {v.id for v in service.list_versions(store_id)}
    temp = service.create_memory(store_id, "/a.md.tmp1", "new", actor="sess_1")
    service.rename_over(store_id, temp.id, target.id, actor="sess_1", fold=True)
    new = [v for v in service.list_versions(store_id) if v.id not in before]
    assert [(v.operation, v.memory_id, v.path) for v in new] == [("modified", target.id, "/a.md")]
    # Not folded when someone else touched the source: its history is closed, not dropped.
    other = service.create_memory(store_id, "/b.md", "b", actor="cli")
    service.rename_over(store_id, other.id, target.id, actor="sess_1", fold=True)
    assert [v.operation for v in service.list_versions(store_id, memory_id=other.id)] == [
        "deleted",
        "created",
    ]
    # Nor a file saved more often than a temporary ever is (and then its history is not
    # counted whole: a file of thousands of versions is renamed as fast as a fresh one).
    busy = service.create_memory(store_id, "/c.md", "c0", actor="sess_1")
    for i in range(1, 4):
        service.update_memory(store_id, busy.id, content=f"c{i}", actor="sess_1")
    service.rename_over(store_id, busy.id, target.id, actor="sess_1", fold=True)
    newest = next(iter(service.list_versions(store_id, memory_id=busy.id)))
    assert newest.operation == "deleted"


def test_own_since_vouches_only_while_nobody_else_committed(
    service: MemoryService, store_id: str
) -> None:
    """What a mount takes as its own (``own_since``): each store's state and the end of its
    change feed, while no other connection has committed since ``data_version`` said so; never
    once another has (PostgreSQL, which has no data_version, never)."""
    version = service.data_version()
    made = service.create_memory(store_id, "/mine.md", "mine")
    service.make_directory(store_id, "/dir")
    heads = service.own_since([store_id], version)
    if service.engine.dialect != "sqlite":
        assert (version, heads) == (None, None)
        return
    assert heads is not None
    state, last_seq = heads[store_id]
    assert (state.revision, state.memory_count) == (
        service.store_states([store_id])[store_id].revision,
        1,
    )
    newest = service.changes(store_id, 0)[-1]
    assert (newest.version.memory_id, last_seq) == (made.id, newest.seq)
    assert service.changes(store_id, last_seq) == []
    other = MemoryService(service.engine, actor="cli")
    try:
        other.create_memory(store_id, "/theirs.md", "theirs")
        assert service.own_since([store_id], version) is None  # someone else wrote since
        now = service.data_version()
        assert service.own_since([store_id], now) is not None  # nobody since this look
    finally:
        other.close()
    assert service.own_since([store_id], None) is None


def test_change_notifications(service: MemoryService, store_id: str) -> None:
    """PostgreSQL tells listeners which store changed, once per transaction; SQLite has no
    notifications (mounts watch data_version there)."""
    listener = service.listen_for_changes()
    if service.engine.dialect == "sqlite":
        assert listener is None
        before = service.data_version()
        other = MemoryService(service.engine, actor="cli")
        other.create_memory(store_id, "/x.md", "x")
        other.close()
        assert service.data_version() != before
        return
    assert listener is not None
    other = MemoryService(service.engine, actor="cli")
    marker = other.create_store("Marker").id

    def heard_until_marker() -> set[str]:
        """Everything heard up to a change of the marker store: notifications arrive in commit
        order, so once it is heard nothing committed before it is still on the way."""
        other.update_store(marker, name="marker")
        heard: set[str] = set()

        def marker_heard() -> bool:
            heard.update(listener.drain())
            return marker in heard

        assert wait_for(marker_heard)
        return heard - {marker}

    try:
        assert listener.drain() == set()
        mem = other.create_memory(store_id, "/x.md", "x")
        other.update_memory(store_id, mem.id, content="y")
        assert heard_until_marker() == {store_id}
        other.update_store(store_id, name="renamed")
        assert heard_until_marker() == {store_id}
        assert heard_until_marker() == set()
        # The listener's own service's changes are not news to it (a mount shows its saves).
        service.update_memory(store_id, mem.id, content="z")
        assert heard_until_marker() == set()
    finally:
        listener.close()
        other.close()


def test_commit_files_hear_every_sqlite_commit(tmp_path: Path) -> None:
    """A mount on SQLite is woken by inotify on the files every commit writes."""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'w.db'}"), actor="a")
    store = service.create_store("Watched").id
    watch = FileWatch(service.commit_files())
    try:
        watch.drain()  # whatever the setup wrote
        assert select.select([watch], [], [], 0)[0] == []
        other = MemoryService(service.engine, actor="b")
        other.create_memory(store, "/x.md", "x")
        other.close()
        assert select.select([watch], [], [], 1.0)[0] == [watch]
        assert watch.drain() is True
        assert watch.drain() is False
    finally:
        watch.close()
        service.close()


def test_a_paused_watch_hears_nothing_until_it_resumes(tmp_path: Path) -> None:
    """A mount pauses its watch while writes go on (each watched write costs the writer):
    paused, a commit is not heard and what was heard before is forgotten; resumed, the next
    commit is heard again."""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'w.db'}"), actor="a")
    # Nothing else commits meanwhile: the search index's catch-up, ~0.2 s after the writes
    # pause, landed just after the resume in one CI run and was heard there.
    service.search_trail.stop()
    store = service.create_store("Watched").id
    watch = FileWatch(service.commit_files())
    try:
        assert watch.listening
        service.create_memory(store, "/heard.md", "x")
        watch.pause()  # forgets the event of that commit
        assert not watch.listening
        service.create_memory(store, "/unheard.md", "x")
        assert select.select([watch], [], [], 0.2)[0] == []
        watch.resume()
        assert watch.listening
        assert select.select([watch], [], [], 0)[0] == []
        service.create_memory(store, "/heard-again.md", "x")
        assert select.select([watch], [], [], 1.0)[0] == [watch]
        assert watch.drain() is True
    finally:
        watch.close()
        service.close()


def test_save_file_targets_the_memory_then_the_path_then_creates(
    service: MemoryService, store_id: str
) -> None:
    a = service.create_memory(store_id, "/a.md", "a0")
    saved, created = service.save_file(store_id, "/a.md", "a1", memory_id=a.id)
    assert (saved.id, saved.content, created) == (a.id, "a1", False)
    # The memory moved elsewhere meanwhile: the version follows it, wherever it is.
    service.update_memory(store_id, a.id, path="/moved.md")
    saved, created = service.save_file(store_id, "/a.md", "a2", memory_id=a.id)
    assert (saved.id, saved.path, created) == (a.id, "/moved.md", False)
    # Deleted meanwhile, and another writer made the path: that memory's next version.
    service.delete_memory(store_id, a.id)
    other = service.create_memory(store_id, "/a.md", "theirs")
    saved, created = service.save_file(store_id, "/a.md", "ours", memory_id=a.id)
    assert (saved.id, saved.content, created) == (other.id, "ours", False)
    saved, created = service.save_file(store_id, "/new.md", "n")
    assert (saved.path, created) == ("/new.md", True)
    assert service.get_store(store_id).memory_count == 2  # /a.md (theirs) and /new.md
    # A directory at the path is a conflict, and nothing changes.
    service.create_memory(store_id, "/d/x.md", "x")
    before = list(service.list_versions(store_id))
    with pytest.raises(errors.Conflict):
        service.save_file(store_id, "/d", "x")
    assert list(service.list_versions(store_id)) == before
    assert service.get_store(store_id).memory_count == 3
    assert service.check(store_id).problems == []


def test_a_store_keeps_a_bounded_number_of_directories(
    service: MemoryService, store_id: str
) -> None:
    """mkdir in a loop grew the store and every mount's tree without end (~700 bytes of a
    daemon's memory each). A store keeps at most MAX_DIRECTORIES_PER_STORE: the next mkdir is
    refused with nothing written, an import skips it, and a delete that empties a directory
    still deletes, without keeping the directory."""
    most = limits.MAX_DIRECTORIES_PER_STORE
    made = service.import_files(
        store_id, lambda: [FileIn(f"/d/{i:05}", directory=True) for i in range(most)]
    )
    assert {out.verdict for out in made} == {"created"}
    before = service.explicit_directories(store_id)
    assert len(before) == most

    with pytest.raises(errors.StoreFull, match=f"keeps {most} directories .* '/one/more/'"):
        service.make_directory(store_id, "/one/more")
    [skipped] = service.import_files(store_id, lambda: [FileIn("/another", directory=True)])
    assert skipped.verdict == "skipped"
    assert f"keeps {most} directories" in skipped.reason
    assert service.explicit_directories(store_id) == before

    implied = service.create_memory(store_id, "/implied/last.md", "the only file here")
    service.delete_memory(store_id, implied.id, keep_directory=True)
    assert service.explicit_directories(store_id) == before  # not kept: no room
    assert tree(service, store_id) == {}

    service.remove_directory(store_id, "/d/00000")
    assert service.make_directory(store_id, "/one/more").path == "/one/more/"
    assert len(service.explicit_directories(store_id)) == most


def test_the_directory_count_keeps_in_step(service: MemoryService, store_id: str) -> None:
    """mkdir's limit reads the count in the store's row (0017), not the rows themselves, so
    every way a directory is made or goes must move it: mkdir, rmdir, keeping an emptied
    directory, a directory's rename, a folder import, an export and import, a store's
    removal; ``db check`` finds a count out of step."""

    def counted(store: str) -> int:
        kept = len(service.explicit_directories(store))
        assert service.store_usage(store)["directories"] == kept
        return kept

    service.make_directory(store_id, "/a/b")
    service.make_directory(store_id, "/a/b/c")
    service.make_directory(store_id, "/gone")
    note = service.create_memory(store_id, "/kept/note.md", "the only file here")
    service.delete_memory(store_id, note.id, keep_directory=True)
    service.remove_directory(store_id, "/gone")
    assert counted(store_id) == 3  # /a/b/, /a/b/c/, /kept/
    service.move_directory(store_id, "/a/", "/z/")
    assert counted(store_id) == 3
    service.import_files(store_id, lambda: [FileIn("/x", directory=True)])
    assert counted(store_id) == 4

    records: list[Any] = []
    service.export_store(store_id, records.append)
    copy = service.import_store(lambda: iter(records), name="Copy").id
    assert counted(copy) == 4
    service.delete_store(copy)
    assert service.check().problems == []

    def out_of_step(tx: Any) -> None:
        tx.run("UPDATE memory_stores SET directory_count = 9 WHERE id = :id", {"id": store_id})

    service.db.run(out_of_step, write=True)
    [problem] = service.check().problems
    assert f"store {store_id}: directory_count is 9 but it keeps 4 directories" in problem


def test_an_rmdir_that_empties_its_parent_keeps_it(service: MemoryService, store_id: str) -> None:
    """``remove_directory(keep_directory=True)``, a mount's rmdir: the directory holding the one
    removed stays (explicit) when the removal empties it, as on a disk; it takes no row, of
    those a store may keep, while anything else is in it; without the flag it goes."""
    for path in ("/p/q", "/r/s", "/r/t", "/u/v"):
        service.make_directory(store_id, path)
    service.create_memory(store_id, "/w/x/y.md", "y")
    service.make_directory(store_id, "/w/z")
    service.remove_directory(store_id, "/p/q", keep_directory=True)
    service.remove_directory(store_id, "/r/s", keep_directory=True)
    service.remove_directory(store_id, "/w/z", keep_directory=True)
    service.remove_directory(store_id, "/u/v")
    assert service.explicit_directories(store_id) == ["/p/", "/r/t/"]
    assert service.store_usage(store_id)["directories"] == 2
    tops = [e.path for e in service.list_memories(store_id, depth=1)]
    assert tops == ["/p/", "/r/", "/w/"]


def test_take_back_keeps_the_path_s_memory(service: MemoryService, store_id: str) -> None:
    """``sed -i.bak``: the file is renamed to its backup, and a new file saved at its name. The
    memory comes back to the name with the new content, one version; the backup is a new
    memory holding the old content. In one transaction, refused with nothing written when
    the memory is not where and what the mount saw."""
    note = service.create_memory(store_id, "/f.md", "one\ntwo\n")
    service.update_memory(store_id, note.id, path="/f.md.bak")
    before = service.store_usage(store_id)

    def attempt(sha: str, at: str = "/f.md.bak") -> tuple[Memory, Memory]:
        return service.take_back(
            store_id, note.id, "/f.md", "one\n2\n", backup_path=at, backup_sha256=sha
        )

    old = service.get_memory(store_id, note.id).content_sha256
    with pytest.raises(errors.PreconditionFailed):  # changed since the mount saw it
        attempt("0" * 64)
    with pytest.raises(errors.PreconditionFailed):  # moved since
        attempt(old, at="/elsewhere.bak")
    assert service.store_usage(store_id) == before
    moved, backup = attempt(old)
    assert (moved.id, moved.path, moved.content) == (note.id, "/f.md", "one\n2\n")
    assert backup.id != note.id
    assert tree(service, store_id) == {"/f.md": "one\n2\n", "/f.md.bak": "one\ntwo\n"}
    history = service.list_versions(store_id, memory_id=note.id, limit=10).data
    assert [(v.path, v.content_size_bytes) for v in history][:2] == [("/f.md", 6), ("/f.md.bak", 8)]
    assert len(service.list_versions(store_id, memory_id=backup.id, limit=10).data) == 1
    assert service.store_usage(store_id)["memories"] == 2
    with pytest.raises(errors.PreconditionFailed):  # the memory is back at /f.md: not again
        attempt(old)
    assert service.check().problems == []


def test_take_back_from_a_file_of_its_own(service: MemoryService, store_id: str) -> None:
    """``perl -i.bak``: the output was saved as a memory of its own before its rename to the
    name. The path's memory takes its content; the output goes, folded away when it is a
    temporary file of this save (as ``rename_over`` folds), else closed with a deletion."""
    for fold in (True, False):
        note = service.create_memory(store_id, f"/{fold}.md", "old\n", actor="mount")
        service.update_memory(store_id, note.id, path=f"/{fold}.md.bak", actor="mount")
        out = service.create_memory(store_id, f"/out-{fold}", "new\n", actor="mount")
        if not fold:  # a full store: the backup is new but the source goes, so it has room
            full = service.store_usage(store_id)["memories"]
            service.update_store(store_id, max_memories=int(full or 0))
        with pytest.raises(errors.InvalidRequest):  # a content, or a source's: not both
            service.take_back(
                store_id, note.id, "/x", "new\n", backup_path="/y", backup_sha256="", source_id="z"
            )
        moved, backup = service.take_back(
            store_id,
            note.id,
            f"/{fold}.md",
            None,
            backup_path=f"/{fold}.md.bak",
            backup_sha256=service.get_memory(store_id, note.id).content_sha256,
            source_id=out.id,
            fold=fold,
            actor="mount",
        )
        assert (moved.id, moved.content) == (note.id, "new\n")
        assert service.get_memory(store_id, backup.id).content == "old\n"
        left = [v.operation for v in service.list_versions(store_id, memory_id=out.id).data]
        assert left == ([] if fold else ["deleted", "created"])
    assert tree(service, store_id) == {
        "/True.md": "new\n",
        "/True.md.bak": "old\n",
        "/False.md": "new\n",
        "/False.md.bak": "old\n",
    }
    assert service.check().problems == []
