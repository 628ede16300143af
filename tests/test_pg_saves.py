"""PostgreSQL: a save over a memory's last save by the same service (a mount saving a file it
saved before) is one round trip: it assumes the store's rules and the memory are as they were,
and sends what checks that with the writes (``Tx.guard``). When anything changed elsewhere the
assumption fails, nothing is written, and the careful save decides exactly as it always did."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mnemofs.content import Content
from mnemofs.errors import (
    Conflict,
    ContentTooLarge,
    NotFound,
    PreconditionFailed,
    SecretDetected,
    StoreArchived,
    StoreFull,
)
from mnemofs.fs.core import MemoryFs
from mnemofs.store import MemoryService

from .conftest import pg_url

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("db_url", ["postgres"], indirect=True)]

GITHUB = "ghp_" + "x1Y2z3" * 6  # split so no scanner flags this file itself


@pytest.fixture
def elsewhere(service: MemoryService) -> Iterator[MemoryService]:
    """Another writer on the same database (another mount, the HTTP server)."""
    other = MemoryService(service.engine, actor="api")
    yield other
    other.close()


def _save(service: MemoryService, store: str, memory_id: str, text: str) -> Any:
    memory, created = service.save_file(
        store, "/f.md", Content.from_text(text), memory_id=memory_id
    )
    assert not created
    return memory


def test_a_save_over_the_last_one_is_one_round_trip(
    service: MemoryService, syncs: list[int]
) -> None:
    store = service.create_store("One").id
    first, _ = service.save_file(store, "/f.md", Content.from_text("one\n"))
    syncs.clear()
    second = _save(service, store, first.id, "one\ntwo\n")
    third = _save(service, store, first.id, "one\ntwo\nthree\n")
    assert syncs == [1, 1]
    assert (second.created_at, third.created_at) == (first.created_at, first.created_at)
    assert service.get_memory(store, first.id).content == "one\ntwo\nthree\n"
    versions = service.list_versions(store, memory_id=first.id).data
    assert [v.id for v in versions] == [
        third.memory_version_id,
        second.memory_version_id,
        first.memory_version_id,
    ]
    assert service.get_store(store).memory_count == 1
    assert service.check().problems == []


def test_a_change_elsewhere_makes_it_save_the_careful_way(
    service: MemoryService, elsewhere: MemoryService, syncs: list[int]
) -> None:
    store = service.create_store("Shared").id
    memory, _ = service.save_file(store, "/f.md", Content.from_text("mine\n"))
    elsewhere.update_memory(store, memory.id, content="theirs\n")
    syncs.clear()
    saved = _save(service, store, memory.id, "mine again\n")  # the last commit is the head
    assert syncs == [1, 2]  # the assumption failed at its round trip; then the careful save
    assert service.get_memory(store, memory.id).content == "mine again\n"
    assert len(service.list_versions(store, memory_id=memory.id).data) == 3
    # Moved elsewhere: the save follows the memory to its new path, as it always did.
    elsewhere.update_memory(store, memory.id, path="/moved.md")
    saved = service.save_file(store, "/f.md", Content.from_text("later\n"), memory_id=memory.id)
    assert (saved[0].path, saved[0].id, saved[1]) == ("/moved.md", memory.id, False)


def test_rules_changed_elsewhere_are_the_ones_that_count(
    service: MemoryService, elsewhere: MemoryService
) -> None:
    store = service.create_store("Rules", secrets="allow").id
    memory, _ = service.save_file(store, "/f.md", Content.from_text("notes\n"))
    _save(service, store, memory.id, "notes\nmore\n")  # the rules as seen: allow, no cap
    elsewhere.update_store(store, secrets="refuse")
    before = service.get_memory(store, memory.id)
    with pytest.raises(SecretDetected, match="GitHub Token on line 3"):
        _save(service, store, memory.id, f"notes\nmore\n{GITHUB}\n")
    elsewhere.update_store(store, max_content_bytes=15)  # the stored 11 bytes fit
    with pytest.raises(ContentTooLarge):
        _save(service, store, memory.id, "notes\nmore\nand more\n")
    elsewhere.update_store(store, max_content_bytes=1000)
    elsewhere.archive_store(store)
    with pytest.raises(StoreArchived):
        _save(service, store, memory.id, "notes\nmore\nand more\n")
    assert service.get_memory(store, memory.id) == before
    assert service.get_store(store).memory_count == 1


def test_what_the_store_allowed_before_does_not_block_an_edit(service: MemoryService) -> None:
    """The whole content is screened when assuming; a credential stored while the store
    allowed it makes that screen refuse, and the careful save screens only the added lines."""
    store = service.create_store("Old", secrets="allow").id
    memory, _ = service.save_file(store, "/f.md", Content.from_text(f"old {GITHUB}\n"))
    service.update_store(store, secrets="refuse")
    _save(service, store, memory.id, "notes\n")  # seen: refuse
    service.update_store(store, secrets="allow")
    _save(service, store, memory.id, f"old {GITHUB}\n")
    service.update_store(store, secrets="refuse")
    _save(service, store, memory.id, f"old {GITHUB}\nnew line\n")
    assert service.get_memory(store, memory.id).content == f"old {GITHUB}\nnew line\n"


def test_what_a_service_remembers_of_its_saves_is_bounded(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mnemofs.store.base.SAVED_KEPT_BYTES", 1000)
    store = service.create_store("Bounded").id
    for i in range(50):
        service.save_file(store, f"/m{i}.md", Content.from_text(f"{i:03d}" + "x" * 97))
    remembered = service._saved
    assert 0 < len(remembered) <= 10
    assert service._saved_bytes == sum(len(last.content) for last in remembered.values())
    assert service._saved_bytes <= 1000
    # The least recently saved go first: the newest saves are all still there.
    assert [last.path for last in remembered.values()] == [f"/m{i}.md" for i in range(40, 50)]
    first = service.find_memory(store, "/m40.md")
    service.save_file(store, "/m40.md", Content.from_text("again" + "x" * 95), memory_id=first.id)
    service.save_file(store, "/m50.md", Content.from_text("050" + "x" * 97))
    assert [last.path for last in remembered.values()][-2:] == ["/m40.md", "/m50.md"]
    assert "/m41.md" not in [last.path for last in remembered.values()]


def test_a_rename_over_the_last_save_is_one_round_trip(
    service: MemoryService, elsewhere: MemoryService, syncs: list[int]
) -> None:
    store = service.create_store("Moves").id
    memory, _ = service.save_file(store, "/a/f.md", Content.from_text("text\n"))
    taken, _ = service.save_file(store, "/b/taken.md", Content.from_text("other\n"))
    syncs.clear()
    moved = service.update_memory(store, memory.id, path="/a/g.md", keep_directory=True)
    assert syncs == [1]
    assert (moved.path, moved.content, moved.created_at) == ("/a/g.md", "text\n", memory.created_at)
    version = service.list_versions(store, memory_id=memory.id, view="full").data[0]
    assert (version.path, version.content) == ("/a/g.md", "text\n")
    # Onto a taken path, or under a file: the careful way refuses, and nothing changed.
    for target in ("/b/taken.md", "/b/taken.md/under.md", "/b"):
        syncs.clear()
        with pytest.raises(Conflict):
            service.update_memory(store, memory.id, path=target)
        assert syncs[0] == 1  # the assumption failed at its one round trip
    assert service.get_memory(store, memory.id).path == "/a/g.md"
    assert service.get_memory(store, taken.id).path == "/b/taken.md"
    # Changed elsewhere since: renamed the careful way, the content as stored now.
    elsewhere.update_memory(store, memory.id, content="theirs\n")
    moved = service.update_memory(store, memory.id, path="/a/h.md")
    assert (moved.path, moved.content) == ("/a/h.md", "theirs\n")
    assert [p.path for p in service.list_memories(store, path_prefix="/a/", depth=1).data] == [
        "/a/h.md"
    ]
    assert service.check().problems == []
    # Remembered again (that rename), then changed or moved elsewhere: the one round trip's
    # assumption fails and the careful way renames what is stored now.
    elsewhere.update_memory(store, memory.id, content="again\n")
    moved = service.update_memory(store, memory.id, path="/c/j.md", keep_directory=True)
    assert (moved.path, moved.content) == ("/c/j.md", "again\n")
    assert service.list_versions(store, memory_id=memory.id).data[0].content_sha256 == (
        moved.content_sha256
    )
    elsewhere.update_memory(store, memory.id, path="/e/k.md")
    service.update_memory(store, memory.id, path="/f/k.md", keep_directory=True)
    tops = [p.path for p in service.list_memories(store, depth=1).data]
    assert "/e/" in tops  # the directory it left is the one kept
    assert "/c/" not in tops
    assert service.check().problems == []


def test_a_create_in_a_store_seen_is_one_round_trip(
    service: MemoryService, elsewhere: MemoryService, syncs: list[int]
) -> None:
    store = service.create_store("Creates").id
    service.save_file(store, "/first.md", Content.from_text("1\n"))  # the store is seen now
    syncs.clear()
    made, created = service.save_file(store, "/second.md", Content.from_text("2\n"))
    assert (created, syncs) == (True, [1])
    assert service.get_memory(store, made.id).content == "2\n"
    assert service.get_store(store).memory_count == 2
    # Made elsewhere meanwhile: the careful save finds it and saves to it, as it always did.
    theirs = elsewhere.create_memory(store, "/third.md", "theirs\n")
    syncs.clear()
    mine, created = service.save_file(store, "/third.md", Content.from_text("mine\n"))
    assert (created, mine.id, syncs[0]) == (False, theirs.id, 1)
    # Under a file, or at a directory: refused the careful way.
    with pytest.raises(Conflict):
        service.save_file(store, "/first.md/under.md", Content.from_text("x\n"))
    service.make_directory(store, "/dir")
    with pytest.raises(Conflict):
        service.save_file(store, "/dir", Content.from_text("x\n"))
    # Full by its own cap, set elsewhere.
    elsewhere.update_store(store, max_memories=3)
    with pytest.raises(StoreFull):
        service.save_file(store, "/fourth.md", Content.from_text("4\n"))
    assert service.get_store(store).memory_count == 3
    assert service.check().problems == []


def _state(service: MemoryService, store: str) -> Any:
    """What a refused change must leave as it was: the store's row, its memories, its
    directories and its versions."""
    return (
        service.get_store(store),
        [(m.path, m.id) for m in service.list_memories(store, depth=None).data],
        service.list_versions(store).data,
    )


def test_mkdir_and_rmdir_are_one_round_trip(
    service: MemoryService, elsewhere: MemoryService, syncs: list[int]
) -> None:
    store = service.create_store("Dirs").id
    service.save_file(store, "/a/file.md", Content.from_text("x\n"))
    syncs.clear()
    service.make_directory(store, "/a/sub")
    service.make_directory(store, "/empty")
    service.remove_directory(store, "/empty")
    assert syncs == [1, 1, 1]
    assert [p.path for p in service.list_memories(store, path_prefix="/a/", depth=1).data] == [
        "/a/file.md",
        "/a/sub/",
    ]
    # Each refusal: the guard failed at the one round trip, nothing was written, and the
    # careful way said why.
    refusals: list[tuple[type[Exception], Any]] = [
        (Conflict, lambda: service.make_directory(store, "/a/file.md")),  # a memory there
        (Conflict, lambda: service.make_directory(store, "/a/file.md/under")),  # under a file
        (Conflict, lambda: service.make_directory(store, "/a/sub")),  # a directory there
        (Conflict, lambda: service.make_directory(store, "/a")),  # holds memories
        (Conflict, lambda: service.remove_directory(store, "/a")),  # not empty: a memory
        (NotFound, lambda: service.remove_directory(store, "/nowhere")),
    ]
    service.make_directory(store, "/b/c")
    refusals.append((Conflict, lambda: service.remove_directory(store, "/b")))  # a directory
    before = _state(service, store)
    for error, change in refusals:
        syncs.clear()
        with pytest.raises(error):
            change()
        assert syncs[0] == 1
        assert _state(service, store) == before
    # Made elsewhere meanwhile: refused the careful way, as before.
    elsewhere.make_directory(store, "/theirs")
    with pytest.raises(Conflict):
        service.make_directory(store, "/theirs")
    elsewhere.save_file(store, "/b/c/inside.md", Content.from_text("y\n"))
    with pytest.raises(Conflict):
        service.remove_directory(store, "/b/c")
    elsewhere.archive_store(store)
    before = _state(service, store)
    for change in (
        lambda: service.make_directory(store, "/late"),
        lambda: service.remove_directory(store, "/a/sub"),
    ):
        with pytest.raises(StoreArchived):
            change()
        assert _state(service, store) == before
    assert service.check().problems == []


def test_a_delete_of_the_last_save_is_one_round_trip(
    service: MemoryService, elsewhere: MemoryService, syncs: list[int]
) -> None:
    store = service.create_store("Deletes").id
    made = [
        service.save_file(store, f"/d/{n}.md", Content.from_text(f"{n}\n"))[0] for n in range(5)
    ]
    syncs.clear()
    gone = service.delete_memory(store, made[0].id, keep_directory=True)
    assert syncs == [1]
    assert (gone.operation, gone.path, gone.memory_id) == ("deleted", "/d/0.md", made[0].id)
    assert service.list_versions(store, memory_id=made[0].id).data[0].id == gone.id
    assert service.get_store(store).memory_count == 4
    lone = service.save_file(store, "/lone/x.md", Content.from_text("x\n"))[0]
    syncs.clear()
    service.delete_memory(store, lone.id, keep_directory=True)  # its directory stays
    assert syncs == [1]
    assert [e.path for e in service.list_memories(store, path_prefix="/lone/").data] == []
    assert "/lone/" in [e.path for e in service.list_memories(store, depth=1).data]
    # Moved elsewhere since: the careful way deletes it where it is now.
    elsewhere.update_memory(store, made[1].id, path="/moved.md")
    syncs.clear()
    gone = service.delete_memory(store, made[1].id)
    assert (gone.path, syncs[0]) == ("/moved.md", 1)
    # Changed elsewhere, with the hash the caller saw: refused, nothing changed.
    elsewhere.update_memory(store, made[2].id, content="theirs\n")
    before = _state(service, store)
    with pytest.raises(PreconditionFailed):
        service.delete_memory(store, made[2].id, expected_content_sha256=made[2].content_sha256)
    assert _state(service, store) == before
    # Archived elsewhere: refused, unless an archived store may be cleaned up (the API).
    elsewhere.archive_store(store)
    before = _state(service, store)
    with pytest.raises(StoreArchived):
        service.delete_memory(store, made[3].id)
    assert _state(service, store) == before
    syncs.clear()
    service.delete_memory(store, made[4].id, archived_ok=True)
    assert syncs == [1]
    with pytest.raises(NotFound):
        service.delete_memory(store, made[4].id, archived_ok=True)
    assert [m.path for m in service.list_memories(store, depth=None).data] == ["/d/2.md", "/d/3.md"]
    assert service.get_store(store).memory_count == 2
    assert service.check().problems == []


def test_a_save_after_a_rename_over_is_one_round_trip(
    service: MemoryService, syncs: list[int]
) -> None:
    """``sed -i`` and ``os.replace`` save by renaming a new file over the old: the target is
    then remembered as that save left it, and the temporary file is forgotten."""
    store = service.create_store("Replace").id
    target, _ = service.save_file(store, "/notes.md", Content.from_text("one\n"))
    temp, _ = service.save_file(store, "/.notes.md.tmp", Content.from_text("one\ntwo\n"))
    service.rename_over(store, temp.id, target.id, fold=True)
    assert temp.id not in service._saved
    syncs.clear()
    _save(service, store, target.id, "one\ntwo\nthree\n")
    assert syncs == [1]
    assert service.get_memory(store, target.id).content == "one\ntwo\nthree\n"
    assert [v.content for v in service.list_versions(store, view="full").data] == [
        "one\ntwo\nthree\n",
        "one\ntwo\n",
        "one\n",
    ]


def test_a_memory_made_again_under_its_id_is_saved_as_it_is_now(
    service: MemoryService, elsewhere: MemoryService, syncs: list[int]
) -> None:
    """Deleted and brought back by a restore elsewhere: the same id, path and content, but a
    new memory (a new creation time); a save over it takes the careful way and says so."""
    store = service.create_store("Again").id
    memory, _ = service.save_file(store, "/f.md", Content.from_text("kept\n"))
    before = elsewhere.list_versions(store).data[0].created_at
    time.sleep(0.002)  # times have milliseconds: the delete and the new creation come after
    elsewhere.delete_memory(store, memory.id)
    elsewhere.restore_store(store, before)
    again = elsewhere.get_memory(store, memory.id)
    assert (again.path, again.content) == ("/f.md", "kept\n")
    assert again.created_at != memory.created_at
    syncs.clear()
    saved = _save(service, store, memory.id, "kept\nmore\n")
    assert syncs == [1, 2]
    assert saved.created_at == again.created_at


def test_a_save_after_a_directory_move_is_one_round_trip(
    service: MemoryService, syncs: list[int]
) -> None:
    """A directory moved by the same service: the files it saved under it are remembered at
    their new paths, so saving one again needs no careful look first."""
    store = service.create_store("Moved").id
    memory, _ = service.save_file(store, "/a/f.md", Content.from_text("one\n"))
    other, _ = service.save_file(store, "/a/b/g.md", Content.from_text("two\n"))
    assert service.move_directory(store, "/a", "/z") == 2
    assert service._saved[memory.id].path == "/z/f.md"
    syncs.clear()
    saved, created = service.save_file(
        store, "/z/f.md", Content.from_text("one\nmore\n"), memory_id=memory.id
    )
    assert not created
    assert syncs == [1]
    assert (saved.path, service.get_memory(store, memory.id).content) == ("/z/f.md", "one\nmore\n")
    assert service.get_memory(store, other.id).path == "/z/b/g.md"
    assert service.check().problems == []


def test_a_temporary_file_renamed_over_the_last_save_is_one_round_trip(
    service: MemoryService, syncs: list[int]
) -> None:
    """``sed -i``'s temporary file is never saved; renamed over the file it replaces, its bytes
    are a save of that file, one round trip as any save over the last one."""
    store = service.create_store("Sed").id
    service.save_file(store, "/f.md", Content.from_text("x\n"))
    session = service.create_session([{"memory_store_id": store}], mount_root="/mnt/memory")
    fs = MemoryFs(service, session, actor=session.id)
    root = fs.root.children["sed"]
    target = fs.lookup(root.ino, "f.md")
    _, fh = fs.create(root.ino, "sedAbC123")
    fs.write(fh, 0, b"y\n")
    fs.flush(fh)
    fs.release(fh)
    syncs.clear()
    fs.rename(root.ino, "sedAbC123", root.ino, "f.md")
    assert syncs == [1]
    assert service.get_memory(store, target.memory_id).content == "y\n"


@pytest.mark.parametrize("change", ["create", "rename", "mkdir"])
def test_the_path_is_judged_after_the_store_is_locked(service: MemoryService, change: str) -> None:
    """A one-round-trip create, rename or mkdir waits for the store's lock held by a change in
    flight elsewhere; the path it wants is judged on what that change committed (here: a file
    made where the new path would need a directory), not on what was there before it waited."""
    import psycopg

    from mnemofs.store.engine import _libpq_uri

    store = service.create_store("Race").id
    other, _ = service.save_file(store, "/other.md", Content.from_text("other\n"))
    mine, _ = service.save_file(store, "/mine.md", Content.from_text("mine\n"))
    results: list[object] = []

    def go() -> None:
        try:
            if change == "create":
                results.append(service.save_file(store, "/x.md/new.md", Content.from_text("n\n")))
            elif change == "rename":
                results.append(service.update_memory(store, mine.id, path="/x.md/mine.md"))
            else:
                results.append(service.make_directory(store, "/x.md/dir"))
        except Exception as exc:
            results.append(exc)

    moving = psycopg.connect(_libpq_uri(pg_url()))
    try:  # a rename elsewhere, in flight: the store locked, /other.md becoming /x.md
        moving.execute("SELECT id FROM memory_stores WHERE id = %s FOR UPDATE", [store])
        moving.execute("UPDATE memories SET path = '/x.md' WHERE id = %s", [other.id])
        racing = threading.Thread(target=go)
        racing.start()
        time.sleep(0.5)
        assert racing.is_alive()  # waiting for the store's lock
        moving.commit()
        racing.join(30)
    finally:
        moving.close()
    assert len(results) == 1
    assert isinstance(results[0], Conflict)
    paths = sorted(m.path for m in service.list_memories(store, depth=None).data)
    assert paths == ["/mine.md", "/x.md"]  # nothing under a file
