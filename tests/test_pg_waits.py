"""A mount's request thread on PostgreSQL (``Database.serve_interactively``): it waits for replies
by spinning first within a stream of saves (store/pgwait.py), and every answer still arrives,
slow ones and failures included; its plans use indexes even when the statistics say a table is
empty. Only that thread is so."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from mnemofs.content import Content
from mnemofs.store import MemoryService
from mnemofs.store.pgwait import SPIN_S, STREAM_GAP_S, STREAM_S, Spin

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_only_the_writer_thread_may_spin_and_every_answer_arrives(
    service: MemoryService,
) -> None:
    """The request thread's connection (and one made again on it) carries its own ``Spin``;
    others wait as psycopg does. Its waits here are not in a stream, so they sleep: the spin's
    own branch is test_a_stream_of_saves_spins_and_every_answer_arrives's."""
    svc = service
    store = svc.create_store("Spin", "").id
    svc.defer_checkpoints()  # what a mount calls on its request thread
    conn = svc.db._connection()
    assert isinstance(conn.spin, Spin)
    # A slow answer comes through psycopg's own wait.
    assert conn.execute("SELECT pg_sleep(0.01), 42").fetchone() == ("", 42)
    memory, _ = svc.save_file(store, "/notes/a.md", Content.from_text("alpha"))
    svc.save_file(store, "/notes/a.md", Content.from_text("beta"), memory_id=memory.id)
    assert svc.get_memory(store, memory.id).content == "beta"
    # A failure the server reports mid-wait still surfaces as itself (the timeout stays with
    # this connection, which is dropped next).
    conn.execute("SET statement_timeout = 50")
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SELECT pg_sleep(2)")
    # A connection made again on the same thread (after a break) is set up the same; other
    # threads' are not.
    svc.db._discard()
    again = svc.db._connection()
    assert isinstance(again.spin, Spin)
    assert again.spin is not conn.spin
    assert again.execute("SHOW enable_seqscan").fetchone()[0] == "off"
    seen: list[tuple[Spin | None, str]] = []

    def look() -> None:
        conn = svc.db._connection()
        seen.append((conn.spin, conn.execute("SHOW enable_seqscan").fetchone()[0]))

    other = threading.Thread(target=look)
    other.start()
    other.join()
    assert seen == [(None, "on")]
    assert [m.path for m in svc.list_memories(store, depth=None).data] == ["/notes/a.md"]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_the_writer_thread_uses_indexes_after_an_emptied_table_was_vacuumed(
    service: MemoryService,
) -> None:
    """A VACUUM of an emptied table leaves statistics that say it is empty; a plan made then
    scans the whole table, and a cached one kept doing so while a store refilled."""
    svc = service
    store = svc.create_store("Vacuumed", "").id
    memory, _ = svc.save_file(store, "/a.md", Content.from_text("a"))
    svc.delete_memory(store, memory.id)
    with psycopg.connect(svc.db.engine.url.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("VACUUM ANALYZE memories")
    svc.defer_checkpoints()
    conn = svc.db._connection()
    for path in ("/a.md", "/b/c.md"):
        svc.save_file(store, path, Content.from_text("again"))
        plan = conn.execute(
            "EXPLAIN SELECT path, id FROM memories WHERE store_id = %s AND path = %s",
            (store, path),
        ).fetchall()
        assert not any("Seq Scan" in line for (line,) in plan), plan


class _CountingSpin(Spin):
    __slots__ = ("spun",)

    def __init__(self) -> None:
        super().__init__()
        self.spun = 0

    def until(self, now: float) -> float:
        end = super().until(now)
        self.spun += end > now
        return end


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_stream_of_saves_spins_and_every_answer_arrives(service: MemoryService) -> None:
    """Saves back to back long enough to spin (a burst does not): the waits that spin, of the
    writes' pipeline and of psycopg's reads alike, still hand over every answer."""
    svc = service
    store = svc.create_store("Stream", "").id
    svc.defer_checkpoints()
    conn = svc.db._connection()
    conn.spin = spin = _CountingSpin()
    memory, _ = svc.save_file(store, "/notes/s.md", Content.from_text("0"))
    deadline = time.monotonic() + 60  # a stream breaks at any gap over STREAM_GAP_S: saves on
    saves = 0
    while spin.spun < 200:
        assert time.monotonic() < deadline, f"{saves} saves, {spin.spun} waits spun"
        saves += 1
        text = f"version {saves}"
        svc.save_file(store, "/notes/s.md", Content.from_text(text), memory_id=memory.id)
        assert svc.get_memory(store, memory.id).content == text
    newest = svc.list_versions(store, memory_id=memory.id, limit=1).data[0]
    assert svc.get_version(store, newest.id).content == f"version {saves}"


def test_waits_spin_only_once_a_stream_of_them_has_gone_on() -> None:
    """A burst after a pause sleeps in every wait (a spinning thread sends the server's process
    to the other vCPU, which has halted); a stream of STREAM_S with no gap over STREAM_GAP_S
    between a reply and the next wait spins, and a longer gap ends the stream."""
    spin = Spin()
    now, step = 100.0, STREAM_GAP_S / 4  # a wait of a quarter gap, then the next at once
    spun = []
    while now < 100.0 + 2 * STREAM_S:
        until = spin.until(now)
        spun.append(until > now)
        if until > now:
            assert until == now + SPIN_S
        now += step
        spin.answered(now)
    first = spun.index(True)
    assert not any(spun[:first])
    assert all(spun[first:])
    assert first - round(STREAM_S / step) in (0, 1)  # the stream's length, give or take a wait
    # A reply, then the next wait a little over the gap later: a new stream, no spin.
    now += STREAM_GAP_S * 1.5
    assert spin.until(now) == now
    spin.answered(now + step)
    assert spin.until(now + step) == now + step
