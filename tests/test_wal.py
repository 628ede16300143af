"""The SQLite WAL stays bounded under a steady stream of saves (issue 11): a passive
checkpoint never rewinds the log while writes keep coming, so ``checkpoint`` restarts it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mnemofs.store import MemoryService, make_engine, sql

SAVES = 3000
MIB = 1024 * 1024


def save_loop(service: MemoryService, store: str, sizes: list[int], stop: threading.Event) -> None:
    content = "x" * 2000
    for i in range(SAVES):
        if stop.is_set():
            return
        service.save_file(store, f"/f{i % 50}.md", f"{i} {content}")
        if i % 20 == 0:
            sizes.append(service.db.wal_size())


def test_checkpoint_cuts_the_wal_while_a_writer_commits_back_to_back(tmp_path: Path) -> None:
    """What a mount does: commits on one thread with checkpoints deferred, ``checkpoint`` from
    another. Each one rewinds the log and cuts the file, however busy the writer (a passive
    checkpoint alone never does, and SQLite's lock would let the writer starve it)."""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}"), actor="api")
    store = service.create_store("S").id
    stop = threading.Event()

    def writer() -> None:
        service.defer_checkpoints()
        save_loop(service, store, [], stop)

    thread = threading.Thread(target=writer)
    thread.start()
    after: list[int] = []
    try:
        for _ in range(5):
            time.sleep(0.1)
            assert service.db.wal_size() > 0
            service.checkpoint(force=True)
            after.append(service.db.wal_size())
    finally:
        stop.set()
        thread.join()
    service.close()
    assert max(after) < 2 * MIB, after  # cut to nothing, plus what came in since


def test_any_other_writer_cuts_the_wal_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI or sync worker does not defer: after a commit, a WAL over the limit (lowered here
    to 1 MiB) is checkpointed and cut by the committing process itself, readers or not."""
    monkeypatch.setattr(sql, "WAL_AUTO_TRUNCATE_BYTES", 1 * MIB)
    monkeypatch.setattr(sql, "WAL_CHECKPOINT_INTERVAL_S", 0.0)  # look after every commit
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    service = MemoryService(make_engine(url), actor="api")
    reader = MemoryService(make_engine(url), actor="api")
    store = service.create_store("S").id
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            reader.list_memories(store).data  # noqa: B018 - a read transaction, again and again
            time.sleep(0.001)

    thread = threading.Thread(target=read)
    thread.start()
    sizes: list[int] = []
    try:
        save_loop(service, store, sizes, threading.Event())
    finally:
        stop.set()
        thread.join()
    service.close()
    reader.close()
    assert max(sizes) < 4 * MIB, max(sizes) // MIB  # without the cut: ~40 MiB and more


def test_a_connection_dies_with_its_thread(tmp_path: Path) -> None:
    """Worker threads come and go (trio retires idle ones): each new one must not leave the
    last one's connection open for good (seen as descriptors growing in a PostgreSQL soak)."""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}"), actor="api")
    store = service.create_store("S").id
    for _ in range(20):
        thread = threading.Thread(target=service.list_memories, args=(store,))
        thread.start()
        thread.join()
    assert len(service.db._all) <= 2  # this thread's and the last worker's, at most
    service.close()
