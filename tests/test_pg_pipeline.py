"""PostgreSQL write transactions on libpq's pipeline (store/pgpipe.py): a change is at most two
round trips, rows hold what psycopg would give, a failure or a refusal rolls back everything the
transaction sent and leaves the connection idle and usable, prepared statements the server lost
are made again, and an answer slower than the spin still arrives."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest
from psycopg import pq

from mnemofs.content import Content
from mnemofs.errors import Conflict, StorageFull, Unavailable
from mnemofs.store import MemoryService
from mnemofs.store.tx import Tx

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("db_url", ["postgres"], indirect=True)]


def _idle(service: MemoryService) -> bool:
    pg = service.db._connection().pgconn
    return (
        pg.pipeline_status == pq.PipelineStatus.OFF
        and pg.transaction_status == pq.TransactionStatus.IDLE
    )


def test_every_change_is_two_round_trips(service: MemoryService, syncs: list[int]) -> None:
    """The lock with its lookups, then the writes with the COMMIT; a save, a rename or a
    delete over this service's own last save of the memory, mkdir and rmdir are one
    (tests/test_pg_saves.py)."""
    store = service.create_store("Trips").id
    service.defer_checkpoints()  # a mount's thread: a spinning wait
    syncs.clear()
    memory, _ = service.save_file(store, "/a/b.md", Content.from_text("one"))
    service.save_file(store, "/a/b.md", Content.from_text("two"), memory_id=memory.id)
    service.update_memory(store, memory.id, path="/a/c.md", keep_directory=True)
    service.make_directory(store, "/d")
    service.remove_directory(store, "/d")
    service.delete_memory(store, memory.id, keep_directory=True)
    assert syncs == [2, 1, 1, 1, 1, 1]
    assert _idle(service)
    versions = service.list_versions(store, memory_id=memory.id).data
    assert [v.path for v in versions] == ["/a/c.md", "/a/c.md", "/a/b.md", "/a/b.md"]


def test_a_change_of_one_round_trip_sends_neither_begin_nor_commit(
    service: MemoryService, syncs: list[int]
) -> None:
    """Statements sent before one sync are one transaction on the server (committed at the
    sync): a change that needs one round trip sends no BEGIN and no COMMIT of its own, and
    is kept whole."""
    store = service.create_store("Implicit").id
    service.defer_checkpoints()
    memory, _ = service.save_file(store, "/a.md", Content.from_text("one"))  # two round trips
    service.db._discard()  # a fresh connection: nothing prepared on it yet
    syncs.clear()
    service.save_file(store, "/a.md", Content.from_text("two"), memory_id=memory.id)
    service.update_memory(store, memory.id, path="/b/a.md", keep_directory=True)
    service.make_directory(store, "/d")
    service.save_file(store, "/d/new.md", Content.from_text("new"))
    service.delete_memory(store, memory.id, keep_directory=True)
    assert syncs == [1, 1, 1, 1, 1]
    sent = service.db._connection().execute("SELECT statement FROM pg_prepared_statements")
    assert {row[0] for row in sent} & {"BEGIN", "COMMIT"} == set()
    assert _idle(service)
    assert [m.path for m in service.list_memories(store, depth=None).data] == ["/d/new.md"]
    assert [p.path for p in service.list_memories(store, depth=1).data] == ["/b/", "/d/"]
    versions = service.list_versions(store, memory_id=memory.id).data
    assert [(v.operation, v.path) for v in versions] == [
        ("deleted", "/b/a.md"),
        ("modified", "/b/a.md"),
        ("modified", "/a.md"),
        ("created", "/a.md"),
    ]


def test_a_patient_write_on_an_impatient_connection_draws_no_warning(
    service: MemoryService,
) -> None:
    """A write after one made at once lifts the lock timeout for its transaction with ``SET
    LOCAL``, which wants an explicit transaction (else the server warns and logs it), even
    when the write is one round trip."""
    store = service.create_store("Patient").id
    heard: list[str] = []
    conn = service.db._connection()
    conn.add_notice_handler(lambda diag: heard.append(str(diag.message_primary)))
    service.write_at_once()
    service.make_directory(store, "/at-once")  # the connection is impatient from now on
    service.make_directory(store, "/patient")  # one round trip, with its SET LOCAL
    assert heard == []
    assert [p.path for p in service.list_memories(store, depth=1).data] == [
        "/at-once/",
        "/patient/",
    ]


def test_rows_hold_what_psycopg_gives(service: MemoryService) -> None:
    store = service.create_store("Types").id
    memory = service.create_memory(store, "/t.md", "text")
    sql = (
        "SELECT v.seq, v.id, v.size_bytes, v.redacted_at, v.size_bytes > 0 AS sized, "
        "s.memory_count, s.max_memories FROM memory_versions v "
        "JOIN memory_stores s ON s.id = v.store_id WHERE v.memory_id = :m"
    )
    piped = service.db.run(lambda tx: tx.all(sql, {"m": memory.id}), write=True)
    plain = service.db.run(lambda tx: tx.all(sql, {"m": memory.id}), write=False)
    assert piped == plain
    assert [type(value) for value in piped[0]] == [type(value) for value in plain[0]]
    assert piped[0].sized is True
    assert piped[0].redacted_at is None
    assert service.db.run(lambda tx: tx.scalar(sql, {"m": memory.id}), write=True) == piped[0][0]


@pytest.mark.parametrize("trips", [1, 2])
def test_a_failed_statement_rolls_back_all_the_transaction_sent(
    service: MemoryService, trips: int
) -> None:
    """In a transaction of one round trip (implicit: no BEGIN, tests above) or of two, a
    statement that fails takes back everything the transaction sent."""
    store = service.create_store("Fail").id
    before = service.get_store(store)

    def clash(tx: Tx) -> None:
        tx.run("UPDATE memory_stores SET description = 'changed' WHERE id = :id", {"id": store})
        insert = "INSERT INTO directories (store_id, path, created_at) VALUES (:s, '/x/', 'now')"
        tx.run(insert, {"s": store})
        tx.run(insert, {"s": store})  # the same row again: a unique violation, found at the
        if trips == 2:  # next round trip, else at the commit's
            tx.one("SELECT 1 AS one")

    with pytest.raises(Unavailable, match="duplicate key"):
        service.db.run(clash, write=True)
    assert _idle(service)
    assert service.get_store(store) == before
    assert service.list_memories(store, depth=1).data == []
    service.make_directory(store, "/y")  # the connection goes on
    assert [p.path for p in service.list_memories(store, depth=1).data] == ["/y/"]


def test_a_full_disk_is_storage_full(service: MemoryService) -> None:
    """The server's ``disk_full`` (as a write that cannot extend its file gets) is
    ``StorageFull``, which a mount says as ENOSPC; nothing the transaction sent is kept and the
    connection goes on."""
    store = service.create_store("Full").id
    before = service.get_store(store)

    def no_room(tx: Tx) -> None:
        tx.run("UPDATE memory_stores SET description = 'changed' WHERE id = :id", {"id": store})
        tx.run(
            "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'disk_full', "
            "MESSAGE = 'could not extend file: No space left on device'; END $$"
        )

    with pytest.raises(StorageFull, match="the database's disk is full: could not extend"):
        service.db.run(no_room, write=True)
    assert _idle(service)
    assert service.get_store(store) == before
    service.make_directory(store, "/y")


def test_a_refusal_after_the_lookups_leaves_nothing(service: MemoryService) -> None:
    store = service.create_store("Refuse").id
    service.create_memory(store, "/taken.md", "x")
    before = service.get_store(store)
    with pytest.raises(Conflict):
        service.make_directory(store, "/taken.md")
    with pytest.raises(Conflict):
        service.create_memory(store, "/taken.md/under.md", "y")
    assert _idle(service)
    assert service.get_store(store) == before  # not even the revision moved
    # The rollback of a refused change is the pipeline's own: psycopg's, once psycopg has
    # prepared a statement of its own, deallocates every prepared statement, ours too.
    conn = service.db._connection()
    for _ in range(6):
        conn.execute("SELECT %s::int", [1])
    ours = "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'mnemofs_%%'"
    made = conn.execute(ours).fetchone()
    with pytest.raises(Conflict):
        service.make_directory(store, "/taken.md")
    assert conn.execute(ours).fetchone() == made


def test_prepared_statements_lost_on_the_server_are_made_again(service: MemoryService) -> None:
    store = service.create_store("Lost").id
    service.create_memory(store, "/one.md", "1")
    conn = service.db._connection()
    assert conn.mnemofs_prepared  # the writes above prepared their statements
    conn.execute("DEALLOCATE ALL")
    service.create_memory(store, "/two.md", "2")  # retried once, prepared anew
    # psycopg's own rollback deallocates everything it prepared (and ours with it): a failed
    # read that psycopg had prepared its query for, then a write.
    for _ in range(6):
        conn.execute("SELECT %s::int", [1])
    conn.execute("BEGIN")
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    conn.rollback()
    service.create_memory(store, "/three.md", "3")
    assert sorted(m.path for m in service.list_memories(store).data) == [
        "/one.md",
        "/three.md",
        "/two.md",
    ]


def test_an_answer_slower_than_the_spin_still_arrives(service: MemoryService) -> None:
    """The store's row is locked by another connection for 0.3 s: the save waits past its spin
    into ``poll`` and completes once the lock is let go."""
    store = service.create_store("Slow").id
    service.defer_checkpoints()
    other = service.engine.connect()
    other.execute("SELECT 1 FROM memory_stores WHERE id = %s FOR UPDATE", [store])
    release = threading.Timer(0.3, other.commit)
    release.start()
    try:
        started = time.monotonic()
        service.create_memory(store, "/late.md", "finally")
        assert time.monotonic() - started >= 0.25
    finally:
        release.join()
        other.close()
    assert service.find_memory(store, "/late.md").content == "finally"
    assert _idle(service)


def test_content_is_compressed_with_lz4(service: MemoryService) -> None:
    """Where the server has lz4 (the test server does), long content is stored with it: pglz
    cost the server 2-3 times as much."""
    store = service.create_store("Squeeze").id
    memory = service.create_memory(store, "/long.md", "a line of notes\n" * 400)
    conn = service.db._connection()
    assert conn.execute("SHOW default_toast_compression").fetchone() == ("lz4",)
    found = conn.execute(
        "SELECT pg_column_compression(content) FROM contents WHERE store_id = %s AND sha256 = %s",
        [store, memory.content_sha256],
    ).fetchall()
    assert found == [("lz4",)]
    assert service.get_memory(store, memory.id).content == "a line of notes\n" * 400


def test_the_server_sends_no_notices(service: MemoryService) -> None:
    """A text with a word too long to index drew a notice from every search catch-up that
    took it in; the service's sessions ask for warnings and errors only."""
    heard: list[str] = []
    service.search_trail.stop()  # the catch-up below is then this thread's, on this connection
    conn = service.db._connection()
    conn.add_notice_handler(lambda diag: heard.append(str(diag.message_primary)))
    store = service.create_store("Blobs").id
    service.create_memory(store, "/blob.md", "x" * 3000)
    service.catch_up_search()
    conn.execute("SELECT to_tsvector('simple', repeat('x', 3000))").fetchall()  # autocommit
    assert heard == []
    assert [h.path for h in service.search(store, "blob")] == ["/blob.md"]


def test_an_interrupted_write_stops_on_the_server_too(service: MemoryService) -> None:
    """Ctrl-C while a write waits for a lock another connection holds: the server stops
    waiting (cancelled), rather than going on after the client is gone and taking the lock
    when it comes free."""
    store = service.create_store("Interrupted").id
    backend = service.db._connection().info.backend_pid
    other = service.engine.connect()
    other.execute("SELECT 1 FROM memory_stores WHERE id = %s FOR UPDATE", [store])
    interrupt = threading.Timer(0.3, os.kill, [os.getpid(), signal.SIGINT])
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            service.create_memory(store, "/never.md", "x")
        waiting = other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            [backend],
        ).fetchone()
        assert waiting == (0,)
    finally:
        interrupt.join()
        other.rollback()
        other.close()
    assert [m.path for m in service.list_memories(store).data] == []
    service.create_memory(store, "/after.md", "y")  # the service goes on
