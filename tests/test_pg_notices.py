"""Listening mounts are told which stores changed after the commit, from a thread of the
writing service, at most every ``NOTICE_INTERVAL_S`` (store/notices.py): a burst of saves
costs the server a few notifications instead of one per save, and its last change is told
too."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from mnemofs.store import MemoryService
from mnemofs.store.notices import CHANGES_CHANNEL, NOTICE_INTERVAL_S, Notices

from .mounted import wait_for


class Heard:
    """Every notification on the changes channel, with when it arrived (a raw listening
    connection: ``Listener.drain`` folds notifications sent together into one)."""

    def __init__(self, service: MemoryService) -> None:
        self.heard: list[tuple[float, str]] = []
        self.senders: set[int] = set()  # the server processes that sent them
        self._conn = service.engine.connect()
        self._conn.autocommit = True
        self._conn.execute(f"LISTEN {CHANGES_CHANNEL}")
        self._stop = False
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop:
            for notify in self._conn.notifies(timeout=0.1):
                self.heard.append((time.monotonic(), notify.payload))
                self.senders.add(notify.pid)

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        self._conn.close()


@pytest.fixture
def heard(service: MemoryService) -> Iterator[Heard]:
    listener = Heard(service)
    try:
        yield listener
    finally:
        listener.close()


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_burst_is_told_a_few_times_and_its_last_change_after_it(
    service: MemoryService, heard: Heard
) -> None:
    store = service.create_store("Busy").id
    memory = service.create_memory(store, "/f.md", "0")
    assert wait_for(lambda: heard.heard)  # an isolated change: told at once
    time.sleep(3 * NOTICE_INTERVAL_S)
    heard.heard.clear()
    began = time.monotonic()
    for n in range(1, 201):
        service.update_memory(store, memory.id, content=str(n))
    ended = time.monotonic()  # the last change has committed
    assert wait_for(lambda: heard.heard and heard.heard[-1][0] > ended)
    time.sleep(3 * NOTICE_INTERVAL_S)  # anything still on its way
    told = [at for at, payload in heard.heard if payload == store]
    assert len(told) == len(heard.heard)
    # One a save was 200; a notice at most every NOTICE_INTERVAL_S, and one after the burst.
    assert len(told) <= (ended - began) / NOTICE_INTERVAL_S + 2
    assert told[-1] > ended


def test_notices_go_at_once_then_at_most_every_interval_and_the_rest_at_stop() -> None:
    sent: list[tuple[float, list[str]]] = []
    notices = Notices(lambda stores: sent.append((time.monotonic(), stores)))
    try:
        notices.committed({"a"})
        assert wait_for(lambda: sent)  # nothing sent for a while: at once
        notices.committed({"b"})
        notices.committed({"c", "b"})
        time.sleep(NOTICE_INTERVAL_S / 5)
        assert [stores for _, stores in sent] == [["a"]]  # too soon after the last
        assert wait_for(lambda: len(sent) == 2)
        assert sent[1][1] == ["b", "c"]  # together, once each
        assert sent[1][0] - sent[0][0] >= NOTICE_INTERVAL_S * 0.99
        notices.committed({"d"})  # due only NOTICE_INTERVAL_S after the last...
    finally:
        stopped = time.monotonic()
        notices.stop()  # ...but told now: the database closes
    assert [stores for _, stores in sent] == [["a"], ["b", "c"], ["d"]]
    assert sent[2][0] - stopped < NOTICE_INTERVAL_S / 2
    notices.committed({"e"})  # a database closed and used again starts the thread again
    notices.stop()
    assert sent[-1][1] == ["e"]


def test_the_thread_ends_when_idle_and_starts_again_with_the_next_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing to tell for ``NOTICE_IDLE_S`` the thread ends and says so (the database
    then closes its connection); the next commit starts a new one."""
    from mnemofs.store import notices as module

    monkeypatch.setattr(module, "NOTICE_IDLE_S", 0.2)
    sent: list[list[str]] = []
    done: list[threading.Thread] = []
    notices = Notices(sent.append, lambda: done.append(threading.current_thread()))

    def telling() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "mnemofs-notices"]

    try:
        notices.committed({"a"})
        first = telling()
        assert len(first) == 1
        assert wait_for(lambda: sent == [["a"]])
        assert wait_for(lambda: not first[0].is_alive())
        assert done == first
        notices.committed({"b"})
        second = telling()
        assert len(second) == 1
        assert second != first
        assert wait_for(lambda: sent == [["a"], ["b"]])
    finally:
        notices.stop()
    assert len(done) == 2
    assert not telling()


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_an_idle_service_closes_the_connection_that_told(
    service: MemoryService, heard: Heard, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemofs.store import notices as module

    monkeypatch.setattr(module, "NOTICE_IDLE_S", 0.2)
    store = service.create_store("Idle").id
    service.create_memory(store, "/a.md", "a")
    assert wait_for(lambda: heard.heard)
    (sender,) = heard.senders  # the notices thread's connection, not this thread's
    assert sender != service.db.run(lambda tx: tx.scalar("SELECT pg_backend_pid()"), write=False)

    def connected() -> bool:
        ask = "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"
        return bool(service.db.run(lambda tx: tx.scalar(ask, {"pid": sender}), write=False))

    assert connected()
    assert wait_for(lambda: not connected())  # idle: the thread ended and closed it
    service.create_memory(store, "/b.md", "b")  # a new thread, a new connection
    assert wait_for(lambda: len(heard.senders) == 2)
