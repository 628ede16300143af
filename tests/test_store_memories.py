"""Memories: create, retrieve, list, update, delete, directories, limits — on both backends."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime

import pytest

from mnemofs import errors, limits
from mnemofs.models import Memory, MemoryPrefix
from mnemofs.store import MemoryService
from mnemofs.store.rows import utc_now


def snapshot(service: MemoryService, store_id: str) -> tuple[object, ...]:
    """Everything observable about a store, to prove a refusal changed nothing."""
    mems = [
        (m.path, service.get_memory(store_id, m.id).content, m.memory_version_id)
        for m in service.list_memories(store_id)
        if isinstance(m, Memory)
    ]
    versions = [(v.id, v.operation, v.path, v.redacted_at) for v in service.list_versions(store_id)]
    dirs = [e.path for e in service.list_memories(store_id, depth=1)]
    return (service.get_store(store_id), mems, versions, dirs)


def paths(service: MemoryService, store_id: str, **kw: object) -> list[str]:
    return [e.path for e in service.list_memories(store_id, **kw)]  # type: ignore[arg-type]


def test_create_returns_memory_and_writes_one_version(
    service: MemoryService, store_id: str
) -> None:
    mem = service.create_memory(store_id, "/prefs/formatting.md", "Always use tabs. ✓")
    assert mem.id.startswith("mem_")
    assert mem.path == "/prefs/formatting.md"
    assert mem.content == "Always use tabs. ✓"
    assert mem.content_size_bytes == len("Always use tabs. ✓".encode())
    assert mem.content_sha256 == hashlib.sha256("Always use tabs. ✓".encode()).hexdigest()
    assert mem.created_at == mem.updated_at
    assert mem.created_at.endswith("Z")
    assert len(mem.created_at) == len("2026-01-01T00:00:00.000Z")
    [version] = service.list_versions(store_id).data
    assert (version.operation, version.path, version.memory_id) == ("created", mem.path, mem.id)
    assert version.id == mem.memory_version_id
    assert version.created_by.stored == "api"
    assert service.get_version(store_id, version.id).content == mem.content
    assert service.get_store(store_id).memory_count == 1


def test_create_never_overwrites(service: MemoryService, store_id: str) -> None:
    service.create_memory(store_id, "/a.md", "one")
    before = snapshot(service, store_id)
    with pytest.raises(errors.Conflict, match="already exists at '/a.md'"):
        service.create_memory(store_id, "/a.md", "two")
    assert snapshot(service, store_id) == before


def test_a_path_is_never_both_file_and_directory(service: MemoryService, store_id: str) -> None:
    service.create_memory(store_id, "/a", "file")
    service.create_memory(store_id, "/d/x.md", "in d")
    before = snapshot(service, store_id)
    with pytest.raises(errors.Conflict, match="'/a' is a memory"):
        service.create_memory(store_id, "/a/b.md", "under a file")
    with pytest.raises(errors.Conflict, match="'/d' is a directory"):
        service.create_memory(store_id, "/d", "over a directory")
    service.make_directory(store_id, "/empty")
    with pytest.raises(errors.Conflict, match="'/empty' is a directory"):
        service.create_memory(store_id, "/empty", "over an empty directory")
    assert snapshot(service, store_id)[1:3] == before[1:3]


@pytest.mark.parametrize("bad", ["relative.md", "/dir/", "/a//b", "/a/../b", "/a\x00b", "/a\tb"])
def test_invalid_paths_are_invalid_requests(
    service: MemoryService, store_id: str, bad: str
) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        service.create_memory(store_id, bad, "x")
    assert repr(bad)[1:-1][:4] in info.value.message or "segment" in info.value.message
    assert service.get_store(store_id).memory_count == 0


def test_content_limits(service: MemoryService, store_id: str) -> None:
    exact = "é" * (limits.MAX_CONTENT_BYTES // 2)
    assert service.create_memory(store_id, "/exact.md", exact).content_size_bytes == 102_400
    before = snapshot(service, store_id)
    with pytest.raises(errors.LimitExceeded, match="102401 bytes"):
        service.create_memory(store_id, "/over.md", exact + "x")
    with pytest.raises(errors.InvalidRequest, match="NUL"):
        service.create_memory(store_id, "/nul.md", "a\x00b")
    with pytest.raises(errors.InvalidRequest, match="not valid Unicode"):
        service.create_memory(store_id, "/surrogate.md", "a\udcffb")
    with pytest.raises(errors.InvalidRequest, match="must be a string"):
        service.create_memory(store_id, "/bytes.md", b"abc")  # type: ignore[arg-type]
    assert snapshot(service, store_id) == before


def test_store_memory_limit(
    service: MemoryService, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_MEMORIES_PER_STORE", 3)
    ids = [service.create_memory(store_id, f"/m{i}.md", "x").id for i in range(3)]
    before = snapshot(service, store_id)
    with pytest.raises(errors.LimitExceeded, match="already holds 3 memories"):
        service.create_memory(store_id, "/m3.md", "x")
    assert snapshot(service, store_id) == before
    # Existing memories stay editable at the limit; a delete makes room again.
    service.update_memory(store_id, ids[0], content="y")
    service.delete_memory(store_id, ids[1])
    service.create_memory(store_id, "/m3.md", "x")
    assert service.get_store(store_id).memory_count == 3


def test_retrieve(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "content")
    assert service.get_memory(store_id, mem.id) == mem
    assert service.find_memory(store_id, "/a.md") == mem
    with pytest.raises(errors.NotFound, match="mem_nope"):
        service.get_memory(store_id, "mem_nope")
    with pytest.raises(errors.NotFound, match="'/b.md'"):
        service.find_memory(store_id, "/b.md")
    other = service.create_store("Other").id
    with pytest.raises(errors.NotFound):
        service.get_memory(other, mem.id)
    with pytest.raises(errors.NotFound, match="memstore_nope"):
        service.get_memory("memstore_nope", mem.id)


def test_list_order_prefix_and_depth(service: MemoryService, store_id: str) -> None:
    for path in [
        "/notes/todo.md",
        "/notes-archive/todo.md",
        "/notes/sub/deep.md",
        "/top.md",
        "/notes.md",
        "/notes/a.md",
        "/z/y/x.md",
    ]:
        service.create_memory(store_id, path, path)
    assert paths(service, store_id) == sorted(
        [
            "/notes/todo.md",
            "/notes-archive/todo.md",
            "/notes/sub/deep.md",
            "/top.md",
            "/notes.md",
            "/notes/a.md",
            "/z/y/x.md",
        ]
    )
    assert paths(service, store_id, path_prefix="/notes/") == [
        "/notes/a.md",
        "/notes/sub/deep.md",
        "/notes/todo.md",
    ]
    top = service.list_memories(store_id, depth=1).data
    assert [(e.type, e.path) for e in top] == [
        ("memory_prefix", "/notes-archive/"),
        ("memory", "/notes.md"),
        ("memory_prefix", "/notes/"),
        ("memory", "/top.md"),
        ("memory_prefix", "/z/"),
    ]
    assert all(isinstance(e, MemoryPrefix | Memory) for e in top)
    assert all(e.content is None for e in top if isinstance(e, Memory))
    assert paths(service, store_id, path_prefix="/notes/", depth=1) == [
        "/notes/a.md",
        "/notes/sub/",
        "/notes/todo.md",
    ]
    assert paths(service, store_id, path_prefix="/nothing/") == []


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"depth": 2}, "depth"),
        ({"depth": -1}, "depth"),
        ({"path_prefix": "/notes"}, "end with '/'"),
        ({"path_prefix": "notes/"}, "start and end"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"cursor": "garbage!"}, "cursor"),
    ],
)
def test_list_refuses_bad_arguments(
    service: MemoryService, store_id: str, kw: dict[str, object], fragment: str
) -> None:
    with pytest.raises(errors.InvalidRequest, match=fragment):
        service.list_memories(store_id, **kw)  # type: ignore[arg-type]


def test_pagination_walks_every_entry_once(service: MemoryService, store_id: str) -> None:
    for d in range(4):
        for f in range(3):
            service.create_memory(store_id, f"/d{d}/f{f}.md", "x")
        service.create_memory(store_id, f"/f{d}.md", "x")
    service.make_directory(store_id, "/empty")
    service.make_directory(store_id, "/e2/deeper")
    for depth in (0, 1):
        full = paths(service, store_id, depth=depth, limit=100)
        for limit in (1, 2, 3, 5):
            walked: list[str] = []
            cursor = None
            while True:
                page = service.list_memories(store_id, depth=depth, limit=limit, cursor=cursor)
                assert len(page.data) <= limit
                walked += [e.path for e in page.data]
                if page.next_page is None:
                    break
                cursor = page.next_page
            assert walked == full, (depth, limit)
    assert paths(service, store_id, depth=1) == [
        "/d0/",
        "/d1/",
        "/d2/",
        "/d3/",
        "/e2/",
        "/empty/",
        "/f0.md",
        "/f1.md",
        "/f2.md",
        "/f3.md",
    ]
    cursor = service.list_memories(store_id, depth=1, limit=1).next_page
    with pytest.raises(errors.InvalidRequest, match="another query"):
        service.list_memories(store_id, depth=0, cursor=cursor)
    with pytest.raises(errors.InvalidRequest, match="another query"):
        service.list_versions(store_id, cursor=cursor)


def test_update_content_path_and_both(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "one")
    m2 = service.update_memory(store_id, mem.id, content="two")
    assert (m2.content, m2.path, m2.id) == ("two", "/a.md", mem.id)
    assert m2.content_sha256 == hashlib.sha256(b"two").hexdigest()
    m3 = service.update_memory(store_id, mem.id, path="/archive/a.md")
    assert (m3.content, m3.path, m3.content_sha256) == ("two", "/archive/a.md", m2.content_sha256)
    m4 = service.update_memory(store_id, mem.id, path="/b.md", content="three")
    assert (m4.content, m4.path) == ("three", "/b.md")
    assert service.get_memory(store_id, mem.id) == m4
    ops = [(v.operation, v.path) for v in service.list_versions(store_id)]
    assert ops == [
        ("modified", "/b.md"),
        ("modified", "/archive/a.md"),
        ("modified", "/a.md"),
        ("created", "/a.md"),
    ]
    assert paths(service, store_id) == ["/b.md"]


def test_update_to_same_state_writes_no_version(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "same")
    again = service.update_memory(store_id, mem.id, content="same", path="/a.md")
    assert again == mem
    assert len(service.list_versions(store_id).data) == 1


def test_update_precondition(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "one")
    ok = service.update_memory(
        store_id,
        mem.id,
        content="two",
        precondition={"type": "content_sha256", "content_sha256": mem.content_sha256},
    )
    before = snapshot(service, store_id)
    with pytest.raises(errors.PreconditionFailed, match=mem.content_sha256):
        service.update_memory(
            store_id,
            mem.id,
            content="three",
            precondition={"type": "content_sha256", "content_sha256": mem.content_sha256},
        )
    assert snapshot(service, store_id) == before
    with pytest.raises(errors.InvalidRequest, match="not a SHA-256"):
        service.update_memory(store_id, mem.id, content="x", precondition={"content_sha256": "zz"})
    with pytest.raises(errors.InvalidRequest, match="unknown"):
        service.update_memory(
            store_id,
            mem.id,
            content="x",
            precondition={"type": "etag", "content_sha256": ok.content_sha256},
        )
    assert snapshot(service, store_id) == before


def test_update_refusals_change_nothing(service: MemoryService, store_id: str) -> None:
    a = service.create_memory(store_id, "/a.md", "a")
    service.create_memory(store_id, "/b.md", "b")
    before = snapshot(service, store_id)
    with pytest.raises(errors.Conflict, match="'/b.md'"):
        service.update_memory(store_id, a.id, path="/b.md", content="new")
    with pytest.raises(errors.InvalidRequest, match="nothing to update"):
        service.update_memory(store_id, a.id)
    with pytest.raises(errors.LimitExceeded):
        service.update_memory(store_id, a.id, content="x" * (limits.MAX_CONTENT_BYTES + 1))
    with pytest.raises(errors.NotFound):
        service.update_memory(store_id, "mem_missing", content="x")
    with pytest.raises(errors.InvalidRequest):
        service.update_memory(store_id, a.id, path="no-slash")
    assert snapshot(service, store_id) == before


def test_a_delete_reaches_only_its_own_store(service: MemoryService, store_id: str) -> None:
    """A memory id named with another store is not found there, and nothing changes."""
    mem = service.create_memory(store_id, "/a.md", "mine")
    other = service.create_store("Other").id
    service.create_memory(other, "/b.md", "theirs")
    before = snapshot(service, store_id), snapshot(service, other)
    with pytest.raises(errors.NotFound, match=f"memory {mem.id!r} not found in store {other!r}"):
        service.delete_memory(other, mem.id)
    with pytest.raises(errors.NotFound, match="memory store 'memstore_nope' not found"):
        service.delete_memory("memstore_nope", mem.id)
    assert (snapshot(service, store_id), snapshot(service, other)) == before
    assert service.get_store(other).memory_count == 1
    assert service.get_memory(store_id, mem.id).content == "mine"


def test_delete_keeps_versions(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/dir/a.md", "secret")
    service.update_memory(store_id, mem.id, content="secret 2")
    deleted = service.delete_memory(store_id, mem.id)
    assert (deleted.operation, deleted.path, deleted.content) == ("deleted", "/dir/a.md", None)
    with pytest.raises(errors.NotFound):
        service.get_memory(store_id, mem.id)
    assert service.get_store(store_id).memory_count == 0
    history = service.list_versions(store_id, memory_id=mem.id).data
    assert [v.operation for v in history] == ["deleted", "modified", "created"]
    assert service.get_version(store_id, history[1].id).content == "secret 2"
    # The directory was implied by the memory: it goes with it.
    assert paths(service, store_id, depth=1) == []
    with pytest.raises(errors.NotFound):
        service.delete_memory(store_id, mem.id)
    # A path freed by a delete can be created again, as a new memory.
    again = service.create_memory(store_id, "/dir/a.md", "fresh")
    assert again.id != mem.id


def test_delete_can_keep_the_directory(service: MemoryService, store_id: str) -> None:
    a = service.create_memory(store_id, "/dir/a.md", "x")
    service.delete_memory(store_id, a.id, keep_directory=True)
    assert paths(service, store_id, depth=1) == ["/dir/"]
    service.remove_directory(store_id, "/dir")
    assert paths(service, store_id, depth=1) == []


def test_directories(service: MemoryService, store_id: str) -> None:
    assert service.make_directory(store_id, "/projects/").path == "/projects/"
    assert paths(service, store_id, depth=1) == ["/projects/"]
    assert paths(service, store_id) == []  # depth 0 lists memories only
    with pytest.raises(errors.Conflict):
        service.make_directory(store_id, "/projects")
    service.create_memory(store_id, "/projects/p.md", "x")
    service.create_memory(store_id, "/file.md", "x")
    with pytest.raises(errors.Conflict, match="'/file.md'"):
        service.make_directory(store_id, "/file.md")
    with pytest.raises(errors.Conflict, match="not empty"):
        service.remove_directory(store_id, "/projects")
    service.make_directory(store_id, "/outer")
    service.make_directory(store_id, "/outer/inner")
    with pytest.raises(errors.Conflict, match="not empty"):
        service.remove_directory(store_id, "/outer")
    service.remove_directory(store_id, "/outer/inner")
    service.remove_directory(store_id, "/outer/")
    with pytest.raises(errors.NotFound, match="/outer/"):
        service.remove_directory(store_id, "/outer")


def test_archived_store_refuses_every_change(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "one")
    service.update_memory(store_id, mem.id, content="two")
    tmp = service.create_memory(store_id, "/a.md.tmp", "new")
    service.make_directory(store_id, "/dir")
    archived = service.archive_store(store_id)
    assert archived.archived_at is not None
    before = snapshot(service, store_id)
    changes = [
        lambda: service.create_memory(store_id, "/b.md", "x"),
        lambda: service.update_memory(store_id, mem.id, content="three"),
        lambda: service.update_memory(store_id, mem.id, path="/c.md"),
        lambda: service.delete_memory(store_id, mem.id),
        lambda: service.prune_versions(store_id, older_than_days=0, keep_last=1),
        lambda: service.update_store(store_id, name="renamed"),
        lambda: service.make_directory(store_id, "/d"),
        lambda: service.remove_directory(store_id, "/dir"),
        lambda: service.move_directory(store_id, "/dir", "/moved"),
        lambda: service.rename_over(store_id, tmp.id, mem.id),
    ]
    for change in changes:
        with pytest.raises(errors.StoreArchived, match="archived"):
            change()
    assert snapshot(service, store_id) == before
    assert service.get_memory(store_id, mem.id).content == "two"
    assert service.archive_store(store_id).archived_at == archived.archived_at


def test_a_missing_store_refuses_every_change(service: MemoryService, store_id: str) -> None:
    """Changes that lock the store without reading its rules still say which store is gone."""
    mem = service.create_memory(store_id, "/a.md", "one")
    tmp = service.create_memory(store_id, "/a.md.tmp", "new")
    gone = "memstore_01JAAAAAAAAAAAAAAAAAAAAAAA"
    changes = [
        lambda: service.update_memory(gone, mem.id, path="/c.md"),
        lambda: service.delete_memory(gone, mem.id),
        lambda: service.delete_memory(gone, mem.id, archived_ok=True),
        lambda: service.make_directory(gone, "/d"),
        lambda: service.remove_directory(gone, "/d"),
        lambda: service.move_directory(gone, "/d", "/e"),
        lambda: service.rename_over(gone, tmp.id, mem.id),
    ]
    for change in changes:
        with pytest.raises(errors.NotFound, match=gone):
            change()
    assert service.get_memory(store_id, mem.id).path == "/a.md"
    assert service.get_store(store_id).memory_count == 2


def test_archived_store_still_redacts_and_deletes_through_the_api(
    service: MemoryService, store_id: str
) -> None:
    """The wire's rules: archiving stops new content, not scrubbing or clean-up."""
    mem = service.create_memory(store_id, "/a.md", "token=one")
    service.update_memory(store_id, mem.id, content="two")
    service.archive_store(store_id)
    assert service.redact_version(store_id, mem.memory_version_id).redacted_at is not None
    gone = service.delete_memory(store_id, mem.id, archived_ok=True)
    assert gone.operation == "deleted"
    assert service.get_store(store_id).memory_count == 0


def test_actor_is_recorded(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "x", actor="sess_123")
    service.update_memory(store_id, mem.id, content="y", actor="cli")
    assert [v.created_by.stored for v in service.list_versions(store_id)] == ["cli", "sess_123"]


def test_rename_onto_own_directory(service: MemoryService, store_id: str) -> None:
    """Found by the stateful test: the memory being moved must not hide its siblings."""
    a = service.create_memory(store_id, "/d/a.md", "a")
    b = service.create_memory(store_id, "/d/b.md", "b")
    with pytest.raises(errors.Conflict, match="'/d' is a directory"):
        service.update_memory(store_id, a.id, path="/d")
    service.delete_memory(store_id, b.id)
    assert service.update_memory(store_id, a.id, path="/d").path == "/d"
    assert paths(service, store_id, depth=1) == ["/d"]


def test_timestamps_are_now_in_utc_to_the_millisecond() -> None:
    """``utc_now`` makes the date and time of day once a second (issue 17): each stamp is
    still now, truncated to the millisecond, also in the next second."""
    for _ in range(3):
        before = datetime.now(UTC)
        before = before.replace(microsecond=before.microsecond // 1000 * 1000)
        stamp = utc_now()
        after = datetime.now(UTC)
        moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert len(stamp) == len("2026-01-01T00:00:00.000Z")
        assert before <= moment <= after
        time.sleep(1.0 - time.time() % 1.0 + 0.01)  # into the next second
