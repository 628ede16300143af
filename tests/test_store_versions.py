"""Versions: listing, retrieval, redaction and pruning — on both backends."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mnemofs import errors
from mnemofs.models import Actor
from mnemofs.store import MemoryService

from .pgstat import rows_read


def age(service: MemoryService, version_ids: list[str], days: float) -> None:
    """Backdate versions, as if written ``days`` ago (the only way to test retention)."""
    when = datetime.now(UTC) - timedelta(days=days)
    stamp = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    params = {f"v{i}": v for i, v in enumerate(version_ids)} | {"stamp": stamp}
    in_list = ", ".join(":" + k for k in params if k != "stamp")
    service.db.run(
        lambda tx: tx.run(
            f"UPDATE memory_versions SET created_at = :stamp WHERE id IN ({in_list})", params
        ),
        write=True,
    )


def test_list_newest_first_filter_and_pages(service: MemoryService, store_id: str) -> None:
    a = service.create_memory(store_id, "/a.md", "a0")
    b = service.create_memory(store_id, "/b.md", "b0")
    for i in range(1, 4):
        service.update_memory(store_id, a.id, content=f"a{i}")
    service.update_memory(store_id, b.id, content="b1")
    every = service.list_versions(store_id).data
    assert [v.path for v in every] == ["/b.md", "/a.md", "/a.md", "/a.md", "/b.md", "/a.md"]
    assert all(v.content is None for v in every)  # listings never carry content
    only_a = service.list_versions(store_id, memory_id=a.id).data
    assert [service.get_version(store_id, v.id).content for v in only_a] == ["a3", "a2", "a1", "a0"]
    first = service.list_versions(store_id, limit=4)
    assert first.has_more
    second = service.list_versions(store_id, limit=4, cursor=first.next_page)
    assert not second.has_more
    assert [v.id for v in first.data + second.data] == [v.id for v in every]
    assert [v.id for v in service.list_versions(store_id, limit=1)] == [v.id for v in every]
    assert service.list_versions(store_id, memory_id="mem_unknown").data == []
    with pytest.raises(errors.NotFound):
        service.list_versions("memstore_unknown")


def test_retrieve_version(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "hello")
    v = service.get_version(store_id, mem.memory_version_id)
    assert (v.content, v.content_sha256, v.operation) == ("hello", mem.content_sha256, "created")
    with pytest.raises(errors.NotFound, match="memver_nope"):
        service.get_version(store_id, "memver_nope")
    other = service.create_store("Other").id
    with pytest.raises(errors.NotFound):
        service.get_version(other, mem.memory_version_id)


def test_redact(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "api_key=SECRET")
    head = service.update_memory(store_id, mem.id, content="api_key=<removed>")
    with pytest.raises(errors.Conflict, match="current head"):
        service.redact_version(store_id, head.memory_version_id)
    assert service.get_version(store_id, head.memory_version_id).content == "api_key=<removed>"
    redacted = service.redact_version(store_id, mem.memory_version_id)
    assert redacted.content is None
    assert redacted.content_sha256 is None
    assert redacted.redacted_at is not None
    # Who, what and when stay; where and how big go with the content (the wire's rule).
    assert (redacted.operation, redacted.created_by, redacted.created_at) == (
        "created",
        Actor("service_account_actor", "api"),
        mem.created_at,
    )
    assert redacted.redacted_by == Actor("service_account_actor", "api")
    assert (redacted.path, redacted.content_size_bytes) == (None, None)
    assert service.get_version(store_id, mem.memory_version_id) == redacted
    assert service.redact_version(store_id, mem.memory_version_id) == redacted  # idempotent
    assert service.get_memory(store_id, mem.id).content == "api_key=<removed>"
    # Once the memory is deleted its last content version is no longer a live head.
    service.delete_memory(store_id, mem.id)
    assert service.redact_version(store_id, head.memory_version_id).content is None
    with pytest.raises(errors.NotFound):
        service.redact_version(store_id, "memver_nope")


def test_prune_keeps_recent_and_newest_of_live(service: MemoryService, store_id: str) -> None:
    live = service.create_memory(store_id, "/live.md", "v0")
    for i in range(1, 15):
        service.update_memory(store_id, live.id, content=f"v{i}")
    gone = service.create_memory(store_id, "/gone.md", "x")
    service.delete_memory(store_id, gone.id)
    fresh = service.create_memory(store_id, "/fresh.md", "new")
    live_versions = [v.id for v in service.list_versions(store_id, memory_id=live.id)]
    gone_versions = [v.id for v in service.list_versions(store_id, memory_id=gone.id)]
    age(service, live_versions + gone_versions, days=31)
    assert service.prune_versions(store_id) == 5 + 2
    kept = [v.id for v in service.list_versions(store_id, memory_id=live.id)]
    assert kept == live_versions[:10]
    assert service.list_versions(store_id, memory_id=gone.id).data == []
    assert [v.id for v in service.list_versions(store_id, memory_id=fresh.id)] == [
        fresh.memory_version_id
    ]
    assert service.get_memory(store_id, live.id).content == "v14"
    assert service.prune_versions(store_id) == 0


def test_prune_is_configurable(service: MemoryService, store_id: str) -> None:
    mem = service.create_memory(store_id, "/a.md", "0")
    for i in range(1, 5):
        service.update_memory(store_id, mem.id, content=str(i))
    ids = [v.id for v in service.list_versions(store_id)]
    age(service, ids, days=3)
    assert service.prune_versions(store_id, older_than_days=7, keep_last=1) == 0
    assert service.prune_versions(store_id, older_than_days=2, keep_last=2) == 3
    assert [v.id for v in service.list_versions(store_id)] == ids[:2]
    assert service.prune_versions(store_id, older_than_days=0, keep_last=1) == 1
    assert service.get_memory(store_id, mem.id).content == "4"
    for bad in ({"keep_last": 0}, {"older_than_days": -1}):
        with pytest.raises(errors.InvalidRequest):
            service.prune_versions(store_id, **bad)  # type: ignore[arg-type]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_check_finds_what_is_wrong(
    service: MemoryService, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mnemofs.store.check._BATCH", 2)  # several batches of each table
    a = service.create_memory(store_id, "/a.md", "alpha")
    service.update_memory(store_id, a.id, content="alpha 2")
    b = service.create_memory(store_id, "/d/b.md", "beta")
    service.delete_memory(store_id, b.id)
    old = service.create_memory(store_id, "/old.md", "old")
    service.update_memory(store_id, old.id, content="old 2")
    service.redact_version(store_id, list(service.list_versions(store_id, memory_id=old.id))[-1].id)
    report = service.check()
    assert report.problems == []
    assert (report.stores, report.memories, report.versions) == (1, 2, 6)

    def corrupt(tx: Any) -> None:
        text_of = "UPDATE contents SET content = 'changed behind our back' WHERE sha256 = :sha"
        tx.run(text_of, {"sha": sha256("alpha 2")})  # the memory's and its head version's
        tx.run("DELETE FROM contents WHERE sha256 = :sha", {"sha": sha256("beta")})
        tx.run("UPDATE memory_stores SET memory_count = 7 WHERE id = :id", {"id": store_id})
        tx.run(
            "DELETE FROM memory_versions WHERE memory_id = :id AND operation = 'deleted'",
            {"id": b.id},
        )

    service.db.run(corrupt, write=True)
    problems = service.check(store_id).problems
    assert len(problems) == 7, problems
    assert "memory_count is 7 but it holds 2 memories" in problems[0]
    assert "'/d/b.md': its newest version is 'created', not a deletion" in problems[1]
    assert f"memory {a.id} at '/a.md': content does not match its SHA-256" in problems[2]
    assert "size_bytes is 7 but the content has 23 bytes" in problems[3]
    assert "(modified '/a.md'): content does not match its SHA-256" in problems[4]
    assert "(modified '/a.md'): size_bytes is 7" in problems[5]
    assert f"(created '/d/b.md'): its content ({sha256('beta')}) is not stored" in problems[6]
    with pytest.raises(errors.NotFound):
        service.check("memstore_nope")


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_quiet_store_reads_its_own_versions_only(service: MemoryService) -> None:
    """PostgreSQL: the change feed, the version list and a snapshot's position of a store
    read that store's versions (the (store_id, seq) index), not every version written after
    them. Before, the planner could walk all versions by seq from the position asked, taking
    the store's to be spread among them: a store quiet while another kept writing had every
    later version of the other read to find none of its own, on every pass of a sync worker
    (counted here in rows read)."""
    quiet = service.create_store("Quiet").id
    busy = service.create_store("Busy").id
    for i in range(2000):
        service.create_memory(quiet, f"/q/{i}.md", f"quiet {i}")
    last = service.changes(quiet, 0, limit=1)[0].seq + 1999
    for i in range(6000):
        service.create_memory(busy, f"/b/{i}.md", f"busy {i}")
    service.search_trail.stop()  # its catch-ups read versions too (0015): done before counting
    service.catch_up_search()
    conn = service.db._connection()
    conn.execute("ANALYZE memory_versions")
    for _ in range(8):  # past the custom plans a prepared statement starts with
        before = rows_read(conn, "memory_versions")
        assert service.changes(quiet, last) == []
        newest = service.list_versions(quiet, limit=20)
        assert service.snapshot(quiet).last_seq == last
        read = rows_read(conn, "memory_versions") - before
        assert read < 100, read
    assert [v.path for v in newest.data] == [f"/q/{i}.md" for i in range(1999, 1979, -1)]
    older = service.list_versions(quiet, limit=20, cursor=newest.next_page)
    assert [v.path for v in older.data] == [f"/q/{i}.md" for i in range(1979, 1959, -1)]
    assert [c.version.path for c in service.changes(quiet, last - 2)] == [
        "/q/1998.md",
        "/q/1999.md",
    ]


def test_store_usage_counts_what_history_holds(service: MemoryService, store_id: str) -> None:
    """What an admin sees of a store (``stores usage``): history grows with every save, and
    each distinct text is kept once, counted in bytes, not characters."""
    assert service.store_usage(store_id) == {
        "memories": 0,
        "directories": 0,
        "versions": 0,
        "texts": 0,
        "text_bytes": 0,
        "oldest_version_at": None,
    }
    a = service.create_memory(store_id, "/a.md", "café\n")  # 6 bytes, 5 characters
    service.update_memory(store_id, a.id, content="café au lait\n")  # 14 bytes
    service.update_memory(store_id, a.id, content="café\n")  # back: no new text
    b = service.create_memory(store_id, "/d/b.md", "café\n")  # the same text again
    service.delete_memory(store_id, b.id, keep_directory=True)  # keeps /d/
    service.make_directory(store_id, "/empty")
    used = service.store_usage(store_id)
    first = service.list_versions(store_id, limit=100).data[-1].created_at
    assert used == {
        "memories": 1,
        "directories": 2,
        "versions": 5,
        "texts": 2,
        "text_bytes": 6 + 14,
        "oldest_version_at": first,
    }
    with pytest.raises(errors.NotFound):
        service.store_usage("memstore_01M8ZZZZZZZZZZZZZZZZZZZZZZ")
