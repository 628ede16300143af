"""A mount's request thread waits for PostgreSQL's replies by spinning first (store/pgwait.py):
every answer still arrives, slow ones and failures included, and only that thread spins."""

from __future__ import annotations

import threading

import psycopg
import pytest

from mnemofs.content import Content
from mnemofs.store import MemoryService
from mnemofs.store.pgwait import SPIN_S

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_the_writer_thread_spins_and_still_gets_every_answer(service: MemoryService) -> None:
    svc = service
    store = svc.create_store("Spin", "").id
    svc.defer_checkpoints()  # what a mount calls on its request thread
    conn = svc.db._connection()
    assert conn.spin_s == SPIN_S
    # Answers slower than the spin come through psycopg's own wait.
    assert conn.execute("SELECT pg_sleep(0.01), 42").fetchone() == ("", 42)
    conn.rollback()
    memory, _ = svc.save_file(store, "/notes/a.md", Content.from_text("alpha"))
    svc.save_file(store, "/notes/a.md", Content.from_text("beta"), memory_id=memory.id)
    assert svc.get_memory(store, memory.id).content == "beta"
    # A failure the server reports mid-wait still surfaces as itself.
    conn.execute("SET statement_timeout = 50")
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SELECT pg_sleep(2)")
    conn.rollback()
    # A connection made again on the same thread (after a break) spins too; other threads not.
    svc.db._discard()
    assert svc.db._connection().spin_s == SPIN_S
    seen: list[float] = []
    other = threading.Thread(target=lambda: seen.append(svc.db._connection().spin_s))
    other.start()
    other.join()
    assert seen == [0.0]
    assert [m.path for m in svc.list_memories(store, depth=None).data] == ["/notes/a.md"]
