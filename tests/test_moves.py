"""What a write left its store at (``ServiceBase.take_moved``, for a server's replies to a
remote mount's changes) and what a remote mount makes of those reports (``moves.OwnMoves``)."""

from __future__ import annotations

from mnemofs.content import Content
from mnemofs.moves import OwnMoves
from mnemofs.store import MemoryService


def _now(service: MemoryService, store: str) -> tuple[str, int, int]:
    """The store's revision and the end of its change feed, read afresh."""
    revision = service.store_states([store])[store].revision  # type: ignore[index]
    feed = service.changes(store, 0, limit=100_000)
    return store, revision, feed[-1].seq if feed else 0


def test_each_write_reports_what_it_left_its_store_at(
    service: MemoryService, syncs: list[int]
) -> None:
    """Exactly the revision and feed end read afterwards; on PostgreSQL in the writes' own
    round trips (the query goes out with the COMMIT)."""
    store = service.create_store("Moves").id
    service.defer_checkpoints()
    changes = [
        lambda: service.save_file(store, "/a/b.md", Content.from_text("one"))[0],
        lambda: service.save_file(store, "/a/b.md", Content.from_text("two"), memory_id=m.id),
        lambda: service.update_memory(store, m.id, path="/a/c.md", keep_directory=True),
        lambda: service.make_directory(store, "/d"),
        lambda: service.remove_directory(store, "/d"),
        lambda: service.delete_memory(store, m.id, keep_directory=True),
    ]
    m = changes[0]()  # not reported: not asked for
    assert service.take_moved() is None
    syncs.clear()
    for change in changes[1:]:
        change()
    trips = list(syncs)
    service.want_moved()
    m = changes[0]()
    assert service.take_moved() == _now(service, store)
    assert service.take_moved() is None  # once
    syncs.clear()
    for change in changes[1:]:
        service.want_moved()
        change()
        assert service.take_moved() == _now(service, store), change
    assert syncs == trips  # no round trip more (PostgreSQL; SQLite counts none)


def test_a_write_that_evicted_reports_nothing(service: MemoryService) -> None:
    """An eviction is in the create's transaction, and a mount shows only the create: the
    revision it made must not be taken as the mount's own. So with a victim in another store
    of an evicting pool (two stores moved)."""
    lru = service.create_store("Lru", on_full="evict-lru", max_memories=1).id
    service.create_memory(lru, "/old.md", "old")
    service.want_moved()
    service.save_file(lru, "/new.md", Content.from_text("new"))
    assert service.take_moved() is None
    mine, theirs = service.create_store("Mine").id, service.create_store("Theirs").id
    pool = service.create_pool("p", 1, on_full="evict-lru")
    service.set_pool([mine, theirs], pool.id)
    service.create_memory(theirs, "/old.md", "old")
    service.want_moved()
    service.save_file(mine, "/new.md", Content.from_text("new"))
    assert service.take_moved() is None
    service.want_moved()
    service.save_file(mine, "/more.md", Content.from_text("more"))  # evicts new.md, its own
    assert service.take_moved() is None
    service.want_moved()
    service.save_file(mine, "/more.md", Content.from_text("more, again"))  # evicts nothing
    assert service.take_moved() == _now(service, mine)


def test_own_moves_are_taken_only_without_a_gap() -> None:
    moves = OwnMoves()
    for header in ("s 5 40", "s 6 41", "s 8 43", "t 2 9", "s 9 not-a-number", "garbage"):
        moves.note(header)
    assert moves.since("s", 4, 6) == 41  # 5 and 6 were its own
    assert moves.since("s", 6, 8) is None  # 7 was someone else's
    assert moves.since("s", 8, 8) is None  # nothing moved; and what was at or below is gone
    moves.note("s 9 44")
    assert moves.since("s", 8, 9) == 44
    assert moves.since("t", 1, 2) == 9
    assert moves.since("u", 0, 1) is None
