"""An ``fsync`` through a mount makes what was saved survive a power loss, not only a crash.

SQLite syncs its log to disk only when it checkpoints (``synchronous=NORMAL``: a commit
survives the crash of any process, docs/decisions.md). So an ``fsync`` of a file, or of a
directory after a rename into it (how careful programs make a replace durable), returns only
once the process that holds the database has synced the log: the mount's own, or for a remote
mount its server's. No test can cut a machine's power: strace, attached to that process, shows
the sync made while the ``fsync`` call was under way.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mnemofs.store import MemoryService, wal

from . import mounted as mounts
from .mounted import mounted, wait_for

pytestmark = pytest.mark.mounted

ROUNDS = 3  # a checkpoint of the log falling inside one fsync's window by chance: not in three


@contextmanager
def _traced(pid: int, out: Path) -> Iterator[None]:
    """strace on every thread of ``pid`` (and those it starts), logging its log syncs with
    the time each began (``-ttt``) and the file of each descriptor (``-y``)."""
    argv = ["strace", "-f", "-qq", "-ttt", "-y", "-e", "trace=fdatasync,fsync", "-o", str(out)]
    tracer = subprocess.Popen([*argv, "-p", str(pid)], stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _all_traced(pid, tracer.pid), 10.0), "strace did not attach"
        yield
    finally:
        tracer.terminate()
        tracer.wait(10)


def _all_traced(pid: int, tracer: int) -> bool:
    for task in os.listdir(f"/proc/{pid}/task"):
        status = Path(f"/proc/{pid}/task/{task}/status").read_text()
        if f"TracerPid:\t{tracer}\n" not in status:
            return False
    return True


def _log_synced(out: Path, wal: str, start: float, end: float) -> bool:
    """Whether the trace shows the log synced by a call begun between ``start`` and ``end``."""
    for line in out.read_text().splitlines():
        _pid, began, call = line.split(None, 2)
        synced = call.startswith(("fdatasync(", "fsync(")) and f"<{wal}>" in call
        if synced and start <= float(began) <= end:
            return True
    return False


def _windows(fsync: Callable[[int], None]) -> list[tuple[float, float]]:
    """``fsync(i)`` for each round, each timed."""
    windows = []
    for i in range(ROUNDS):
        start = time.time()
        fsync(i)
        windows.append((start, time.time()))
    return windows


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("mount_via", ["local", "remote"], indirect=True)
def test_an_fsync_returns_once_the_database_log_is_on_disk(
    service: MemoryService, db_url: str, mount_via: str, tmp_path: Path
) -> None:
    store = service.create_store("Synced").id
    session = service.create_session([{"memory_store_id": store}])
    wal = db_url.removeprefix("sqlite:///") + "-wal"
    trace = tmp_path / "strace.out"
    with mounted(db_url, session.id, tmp_path / "mnt") as daemon:
        folder = daemon.root / "synced"
        holder = daemon.process.pid
        if mount_via == "remote":
            holder = mounts._servers[db_url][0].process.pid  # the server holds the database

        def save_and_fsync(i: int) -> None:
            with open(folder / f"note-{i}.md", "w") as f:
                f.write(f"note {i}\n")
                f.flush()
                os.fsync(f.fileno())

        def replace_and_fsync_the_directory(i: int) -> None:
            (folder / f".note-{i}.tmp").write_text(f"note {i}, replaced\n")
            os.replace(folder / f".note-{i}.tmp", folder / f"note-{i}.md")
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        with _traced(holder, trace):
            for fsync in (save_and_fsync, replace_and_fsync_the_directory):
                for start, end in _windows(fsync):
                    assert wait_for(lambda s=start, e=end: _log_synced(trace, wal, s, e)), (
                        f"{fsync.__name__}: no sync of the log during the fsync",
                        trace.read_text()[-2000:],
                    )
    assert [m.path for m in service.list_memories(store).data] == [
        f"/note-{i}.md" for i in range(ROUNDS)
    ]
    for i in range(ROUNDS):
        assert service.find_memory(store, f"/note-{i}.md").content == f"note {i}, replaced\n"


def test_a_flush_to_disk_needs_no_log(service: MemoryService, tmp_path: Path) -> None:
    """On SQLite with no log file (the last connection closed copies every commit into the
    database and removes it; a forced checkpoint empties it), and on PostgreSQL (its commits
    are as durable as its server is set to make them), a flush to disk has nothing to do and
    does not fail."""
    store = service.create_store("Flushed").id
    service.create_memory(store, "/a.md", "a\n")
    service.flush_to_disk()
    service.checkpoint(force=True)
    service.flush_to_disk()
    assert service.find_memory(store, "/a.md").content == "a\n"
    gone = wal.Wal(str(tmp_path / "closed.db"))
    assert not Path(gone.path).exists()
    gone.sync()  # nothing to open: no error


def test_many_fsyncs_at_once_share_their_disk_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Programs that ``fsync`` while another's flush is under way wait for it, then share
    one flush begun after they came (which covers their commits): one each would let a few
    busy programs keep the disk flushing. A spy that still flushes counts them."""
    db = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE t (x)")
    log = wal.Wal(str(tmp_path / "a.db"))
    real, begun, release = os.fdatasync, [], threading.Event()

    def flush(fd: int) -> None:
        begun.append(time.monotonic())
        if len(begun) == 1:
            release.wait(10)  # the first holds on until every other caller has come
        real(fd)

    monkeypatch.setattr(os, "fdatasync", flush)
    first = threading.Thread(target=log.sync)
    first.start()
    assert wait_for(lambda: len(begun) == 1)
    came = time.monotonic()
    others = [threading.Thread(target=log.sync) for _ in range(8)]
    for thread in others:
        thread.start()
    time.sleep(0.3)  # every one of them waiting for the first's
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert len(begun) == 2
    assert begun[1] > came
    db.execute("INSERT INTO t VALUES (1)")
    log.sync()  # alone: a flush of its own
    assert len(begun) == 3
    db.close()
