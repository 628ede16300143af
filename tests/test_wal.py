"""The SQLite WAL stays bounded under a steady stream of saves (issue 11): a passive
checkpoint never rewinds the log while writes keep coming, so ``checkpoint`` restarts it. And a
busy mount does not make every write to it pay for an inotify watch (issue 17)."""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mnemofs.remote import RemoteBackend
from mnemofs.store import MemoryService, WriteWouldWait, make_engine, wal

from .mounted import mounted, token_for, wait_for
from .served import serving

SAVES = 3000
HOLD_S = 5.0  # how long a test's other writer holds the lock at most
MIB = 1024 * 1024


def save_loop(
    service: MemoryService,
    store: str,
    sizes: list[int],
    stop: threading.Event,
    count: int | None = SAVES,
) -> None:
    """``count`` saves (None: until ``stop``), the WAL's size noted every 20."""
    content = "x" * 2000
    for i in range(count) if count is not None else itertools.count():
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
        # Until told to stop: a fixed count could all be saved before the fifth checkpoint
        # on a fast machine, and the wait below would then find the writer gone.
        save_loop(service, store, [], stop, count=None)

    thread = threading.Thread(target=writer)
    thread.start()
    after: list[int] = []
    try:
        for _ in range(5):
            time.sleep(0.1)
            deadline = time.monotonic() + 5  # a loaded machine may hold the writer back
            while service.db.wal_size() == 0:  # something to cut: the writer committed since
                assert thread.is_alive(), "the writer stopped"
                assert time.monotonic() < deadline, "the writer committed nothing for 5 s"
                time.sleep(0.005)
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
    monkeypatch.setattr(wal, "WAL_AUTO_TRUNCATE_BYTES", 1 * MIB)
    monkeypatch.setattr(wal, "WAL_CHECKPOINT_INTERVAL_S", 0.0)  # look after every commit
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


def test_under_load_the_log_is_rewound_and_once_idle_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While saves keep coming, a checkpoint whose log has reached the limit (here 256 KiB)
    RESTARTs: the file keeps its size and the next writer overwrites it from the start, so it
    stops growing without an ftruncate that every save would wait for. Once writes stop, the
    next checkpoint (due by time) copies every commit into the database file and leaves the log
    as it is, so the next burst overwrites it instead of growing it again; once it has been
    idle for ``WAL_IDLE_CUT_S`` a checkpoint cuts it to nothing."""
    monkeypatch.setattr(wal, "WAL_CHECKPOINT_BYTES", 256 * 1024)
    path = tmp_path / "db.sqlite"
    service = MemoryService(make_engine(f"sqlite:///{path}"), actor="api")
    service.defer_checkpoints()
    store = service.create_store("S").id
    db = service.db
    sizes = []
    for i in range(600):
        service.save_file(store, f"/f{i % 20}.md", f"{i} " + "x" * 2000)
        if i % 10 == 0:  # a mount looks every 0.1 s: several saves in between
            # The file changed (asked here, not after every save: a rewound file keeps its
            # size and its mtime moves at the kernel's tick, so a save within a millisecond or
            # two of a pass may not show yet; the next one or the interval's pass takes it).
            assert db.checkpoint_due()
            db.checkpoint()
        sizes.append(db.wal_size())
    assert min(sizes) > 0  # rewound, never cut while the saves came
    assert max(sizes) < 2 * MIB, max(sizes)  # without the rewinds: past 10 MiB
    db.checkpoint()
    assert not db.checkpoint_due()  # nothing new since that pass
    assert db._wal is not None
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S  # a second without a save
    assert db.checkpoint_due()
    db.checkpoint()
    kept = db.wal_size()
    assert kept > 0  # copied back, not cut
    copy = tmp_path / "copy.sqlite"  # what a plain cp of the database file holds (another
    # process: opening and closing the file here would drop this process's locks on it)
    subprocess.run(["cp", str(path), str(copy)], check=True)
    copied = MemoryService(make_engine(f"sqlite:///{copy}"), actor="api")
    assert copied.find_memory(store, "/f19.md").content == "599 " + "x" * 2000
    copied.close()
    for i in range(3):  # the next burst starts the log over inside the file it left
        service.save_file(store, f"/g{i}.md", "y" * 2000)
    assert db.wal_size() == kept
    db.checkpoint()
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S
    db._wal._changed_at -= wal.WAL_IDLE_CUT_S  # a minute without a save
    assert db.checkpoint_due()
    db.checkpoint()
    assert db.wal_size() == 0
    assert not db.checkpoint_due()
    service.close()


def _deferring(tmp_path: Path) -> tuple[Path, MemoryService, str]:
    """A database file, a service that checkpoints only when asked (as a mount's upkeep
    does), and a store in it."""
    path = tmp_path / "db.sqlite"
    service = MemoryService(make_engine(f"sqlite:///{path}"), actor="api")
    service.defer_checkpoints()
    return path, service, service.create_store("S").id


def _salts(wal_file: Path) -> bytes:
    """The WAL header's salts: new each time the log is started over."""
    with open(wal_file, "rb") as f:  # the -wal file: SQLite holds no locks on it
        return f.read(24)[16:24]


def test_a_quiet_log_is_started_over_by_the_checkpoint_not_by_the_next_save(
    tmp_path: Path,
) -> None:
    """The writer that starts a copied-back log over writes and syncs its header (on a disk,
    ~0.9 ms of the first save after every pause). A pass due by time that copied the whole
    log primes it instead, with a commit that changes nothing, and the next save appends to
    it; while nobody writes, nothing is due until the idle cut (no pass, no I/O)."""
    path, service, store = _deferring(tmp_path)
    db = service.db
    assert db._wal is not None
    for i in range(20):
        service.save_file(store, f"/f{i}.md", "x" * 2000)
    db.checkpoint()  # due: the file changed
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S  # a second without a save
    db.checkpoint()  # copies back (nothing left) and primes
    salts = _salts(Path(f"{path}-wal"))
    before = os.stat(path)
    time.sleep(0.05)  # past the file clock's tick
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S
    assert not db.checkpoint_due()  # nobody wrote since: nothing to do but the idle cut
    due_in = db.checkpoint_in()
    assert due_in is not None
    assert due_in > wal.WAL_IDLE_CUT_S - 10
    db.checkpoint()  # the primer's frame stays in the log
    after = os.stat(path)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    service.save_file(store, "/g.md", "y" * 2000)
    assert _salts(Path(f"{path}-wal")) == salts  # appended: the log was not started over
    assert service.find_memory(store, "/g.md").content == "y" * 2000
    db.checkpoint()
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S
    db.checkpoint()  # the save was copied back (and the log primed again)
    copy = tmp_path / "copy.sqlite"
    subprocess.run(["cp", str(path), str(copy)], check=True)
    copied = MemoryService(make_engine(f"sqlite:///{copy}"), actor="api")
    assert copied.find_memory(store, "/g.md").content == "y" * 2000
    copied.close()
    service.close()


def test_a_deferring_service_says_when_its_upkeep_has_work(tmp_path: Path) -> None:
    """``upkeep_in``, the clock a mount's upkeep rests by: work now after a save (the WAL
    changed); once the save is copied back, the log primed and the search index caught up,
    none but the WAL's idle cut a minute on; a commit heard from another process (it may
    have left changes for the index) or a read noted brings work within a second."""
    path, service, store = _deferring(tmp_path)
    db = service.db
    assert db._wal is not None
    service.data_version()  # what a mount's watcher reads first
    memory, _ = service.save_file(store, "/a.md", "a save\n")
    wait = service.upkeep_in()
    assert wait is not None
    assert wait <= 0
    service.checkpoint()
    time.sleep(0.25)  # the writes have paused: the search index's turn
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S  # and the pass due by time
    assert service.checkpoint_due()
    service.checkpoint()
    wait = service.upkeep_in()
    assert wait is not None
    assert wait > wal.WAL_IDLE_CUT_S - 10, wait
    assert service.search_trail.due_in() is None
    other = MemoryService(make_engine(f"sqlite:///{path}"), actor="cli")
    other.save_file(store, "/b.md", "another process's save\n")
    other.close()
    service.data_version()  # the watcher hears it
    wait = service.search_trail.due_in()
    assert wait is not None
    assert wait <= 1.0
    service.checkpoint()  # the WAL pass, and in a second the catch-up
    time.sleep(1.05)
    service.checkpoint()
    assert service.search_trail.due_in() is None
    service.get_memory(store, memory.id)  # a read, noted
    wait = service.upkeep_in()
    assert wait is not None
    assert wait <= 1.0
    service.close()


def test_a_primed_log_that_another_process_wrote_to_is_copied_back_from_any_thread(
    tmp_path: Path,
) -> None:
    """A mount checkpoints from whichever worker thread trio hands it, each with its own
    connection. Once the log is primed, another process's save must still be copied back by
    the next pass, whatever thread runs it: ``data_version`` counts per connection, so a
    fresh connection's value said nothing about what the priming one had seen (it matched,
    and the save stayed in the log until the idle cut, a minute on)."""
    path, service, store = _deferring(tmp_path)
    db = service.db
    assert db._wal is not None

    def in_a_new_thread() -> None:
        thread = threading.Thread(target=db.checkpoint)
        thread.start()
        thread.join()

    service.save_file(store, "/first.md", "a save, then a rest\n")
    in_a_new_thread()  # copies back
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S
    in_a_new_thread()  # primes
    assert db._wal._primed
    other = MemoryService(make_engine(f"sqlite:///{path}"), actor="cli")
    other.save_file(store, "/from-cli.md", "saved elsewhere\n")
    time.sleep(0.05)  # past the file clock's tick
    assert db.checkpoint_due()
    in_a_new_thread()
    assert _in_database_file(path, "/from-cli.md")
    other.close()
    service.close()


def test_a_log_another_writer_holds_is_not_primed(tmp_path: Path) -> None:
    """While another connection (another process, say) holds the write lock, the pass copies
    back and leaves the log for that writer to start over (the primer does not wait for the
    lock: its busy timeout is 0); the next quiet pass primes it."""
    path, service, store = _deferring(tmp_path)
    db = service.db
    assert db._wal is not None
    service.save_file(store, "/f.md", "x" * 2000)
    db.checkpoint()  # the first pass (none for a second before it) primes
    service.save_file(store, "/f.md", "z" * 2000)  # and this appends to the primed log
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S
        db.checkpoint()  # copies back; the primer finds the lock taken (it does not wait)
        assert not db._wal._primed
        other.execute("ROLLBACK")
    finally:
        other.close()
    service.save_file(store, "/g.md", "y" * 2000)
    db.checkpoint()
    db._wal.checkpointed_at -= wal.WAL_CHECKPOINT_INTERVAL_S
    db.checkpoint()
    assert db._wal._primed
    assert service.find_memory(store, "/g.md").content == "y" * 2000
    service.close()


def test_background_work_steps_aside_for_a_waiting_writer(tmp_path: Path) -> None:
    """SQLite lets one writer in at a time, and a thread that releases this process's lock
    and asks again at once may get it back before a waiting one wakes up (a mount's save
    waited 30-70 ms behind every batch of a search catch-up). Between its batches background
    work calls ``step_aside``, which returns only once the waiting writer has the lock.
    (Without it the lock is handed over in some tries and not in others: five tries.)"""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}"), actor="api")
    log = service.db._wal
    assert log is not None

    def waiting_writer(inside: threading.Event) -> None:
        log.take_turn()
        inside.set()
        time.sleep(0.05)
        log.end_turn()

    try:
        for _ in range(5):
            inside = threading.Event()
            thread = threading.Thread(target=waiting_writer, args=(inside,))
            log.take_turn()  # a batch
            thread.start()
            while not log._queued:
                time.sleep(0.001)
            log.end_turn()
            service.db.step_aside()
            got_it_back = log._writer.acquire(blocking=False)
            if got_it_back:
                log._writer.release()
            thread.join()
            assert not got_it_back  # the waiting writer had it first
            assert inside.is_set()
    finally:
        service.close()


def test_background_work_steps_aside_for_a_writer_that_keeps_asking(tmp_path: Path) -> None:
    """A writer that must not wait (``try_turn``, a server's event loop) asks again and again
    rather than queue: ``step_aside`` lets it in too, or a long search catch-up would keep it
    out batch after batch."""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}"), actor="api")
    log = service.db._wal
    assert log is not None
    asked, got_it_back = threading.Event(), []

    def batches() -> None:
        log.take_turn()  # a batch
        asked.wait(30)
        log.end_turn()
        service.db.step_aside()
        got_it_back.append(log._writer.acquire(blocking=False))
        if got_it_back[-1]:
            log._writer.release()

    try:
        for _ in range(5):
            asked.clear()
            thread = threading.Thread(target=batches)
            thread.start()
            while log.try_turn():  # not taken yet: give it back and ask again
                log.end_turn()
            asked.set()
            while not log.try_turn():
                time.sleep(0.001)  # between its tries, as the server's loop pauses
            time.sleep(0.01)
            log.end_turn()
            thread.join()
        assert got_it_back == [False] * 5  # the asking writer had it first
    finally:
        service.close()


def test_a_server_s_upkeep_keeps_its_wal_and_its_search_index(tmp_path: Path) -> None:
    """``mnemofs serve`` on SQLite commits on its event loop, and those commits used to copy
    the WAL back themselves once it passed ``WAL_AUTO_TRUNCATE_BYTES``: every request of every
    client waited for that pass (a health check's p99 40-45 ms under a stream of saves, 6 ms
    now: a latency, measured, not asserted here). Like a mount it now defers them to an upkeep
    of its own, which also takes the saves into the search index once they pause: that, and a
    WAL within issue 17's bound meanwhile, is what this checks."""
    db = tmp_path / "served.sqlite"
    url = f"sqlite:///{db}"
    service = MemoryService(make_engine(url), actor="cli")
    store = service.create_store("Served").id
    session = service.create_session([{"memory_store_id": store}]).id
    service.close()
    sizes: list[int] = []
    with serving(url, tmp_path / "server.log") as server:
        backend = RemoteBackend(server.url, token_for(url, session))
        try:
            for i in range(SAVES):
                backend.save_file(store, f"/f{i % 50}.md", f"{i} " + "x" * 2000)
                if i % 20 == 0:
                    sizes.append(os.stat(f"{db}-wal").st_size)
        finally:
            backend.close()

        def caught_up() -> bool:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                return conn.execute("SELECT count(*) FROM search_pending").fetchone()[0] == 0

        assert wait_for(caught_up, timeout=30)
    assert max(sizes) < 64 * MIB, max(sizes) // MIB


def test_a_write_at_once_does_nothing_rather_than_wait(tmp_path: Path) -> None:
    """A thread that must not wait for the write lock (a server's event loop) gets
    ``WriteWouldWait`` from its call's first write while another process or another thread of
    its own writes, and nothing of that call is kept. Once a write of the call has committed,
    the later ones wait as usual: the call cannot be made again by then."""
    db = tmp_path / "db.sqlite"
    service = MemoryService(make_engine(f"sqlite:///{db}"), actor="api")
    service.defer_checkpoints()  # as a server or a mount: no search thread waits in its stead
    store = service.create_store("At once").id
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    log = service.db._wal
    assert log is not None
    guard = threading.Lock()

    def commit() -> None:  # at the latest HOLD_S later: a write that waits fails, not hangs
        with guard:
            if other.in_transaction:
                other.execute("COMMIT")

    release = threading.Timer(HOLD_S, commit)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process writes
        release.start()
        service.write_at_once()
        with pytest.raises(WriteWouldWait):
            service.create_memory(store, "/a.md", "not now\n")
        commit()

        writing, done = threading.Event(), threading.Event()

        def write_elsewhere() -> None:  # another thread of this process writes
            log.take_turn()
            writing.set()
            done.wait(HOLD_S)
            log.end_turn()

        thread = threading.Thread(target=write_elsewhere)
        thread.start()
        try:
            assert writing.wait(30)
            service.write_at_once()
            with pytest.raises(WriteWouldWait):
                service.create_memory(store, "/a.md", "not now\n")
        finally:
            done.set()
            thread.join()
        assert service.list_memories(store).data == []

        service.write_at_once()
        service.create_memory(store, "/a.md", "at once\n")  # the lock was free
        other.execute("BEGIN IMMEDIATE")
        # Longer than the retries of a busy transaction (``Database.run``) take in all: its
        # connection, made impatient (no busy handler), waits in ``_begin_patiently``.
        threading.Timer(1.5, commit).start()
        service.create_memory(store, "/b.md", "waited\n")  # the same call's next write waits
        assert [m.path for m in service.list_memories(store).data] == ["/a.md", "/b.md"]
    finally:
        release.cancel()
        with guard:
            other.close()
        service.close()


def test_the_pass_that_stops_the_saves_has_little_left_to_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log past ``WAL_CHECKPOINT_BYTES`` is started over by a RESTART pass, during which
    this process's saves wait; it copies back what the passive pass before it left. Saves
    committed during that passive pass are copied by another one, while saves may go on, and
    the RESTART then holds this process's writes back itself, not by SQLite's busy handler's
    sleeps (on ext4 the saves' wait went from a median of 9 ms to 3)."""
    monkeypatch.setattr(wal, "WAL_CHECKPOINT_BYTES", 256 * 1024)
    path, service, store = _deferring(tmp_path)
    log = service.db._wal
    assert log is not None
    for i in range(200):
        service.save_file(store, f"/f{i % 50}.md", f"{i} " + "x" * 2000)
    # A reader holds back what the first pass can copy, so the saves made during it append
    # to the log (as they do when they commit while it copies) instead of starting it over.
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM memories").fetchone()
    for i in range(50):
        service.save_file(store, f"/f{i}.md", f"{i} " + "z" * 2000)
    conn = service.db._connection()
    passes: list[tuple[str, int]] = []
    held: list[bool] = []

    def try_to_write() -> None:
        got = log._writer.acquire(blocking=False)
        if got:
            log._writer.release()
        held.append(not got)

    class Watched:
        """The connection, telling what each checkpoint pass found."""

        def execute(self, sql: str, *args: object) -> object:
            if "wal_checkpoint" not in sql:
                return conn.execute(sql, *args)
            mode = sql.split("(")[1].rstrip(")")
            if mode == "RESTART":
                other = threading.Thread(target=try_to_write)
                other.start()
                other.join()
            row = conn.execute(sql).fetchone()
            passes.append((mode, row[1]))
            if len(passes) == 1:  # saves commit while the first pass copies
                reader.rollback()
                for i in range(10):
                    service.save_file(store, f"/g{i}.md", f"{i} " + "y" * 2000)
            return _Row(row)

    assert log.rewind(Watched(), cut=False)
    modes = [mode for mode, _ in passes]
    assert modes[:2] == ["PASSIVE", "PASSIVE"], passes
    assert modes[-1] == "RESTART", passes
    assert passes[1][1] > passes[0][1]  # the second pass took in the saves' frames
    assert held == [True]  # nothing of this process wrote while the RESTART ran
    reader.close()
    service.save_file(store, "/h.md", "after")
    assert service.find_memory(store, "/g9.md").content == "9 " + "y" * 2000
    service.close()


class _Row:
    def __init__(self, row: tuple[int, int, int]) -> None:
        self.row = row

    def fetchone(self) -> tuple[int, int, int]:
        return self.row


def _inotify_watches(pid: int) -> int:
    """How many inotify watches the process holds (its fds' ``fdinfo`` lists each one)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        with contextlib.suppress(OSError):
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
            count += sum(line.startswith("inotify wd:") for line in info.splitlines())
    return count


@pytest.mark.mounted
def test_a_busy_sqlite_mount_stops_listening_and_still_sees_changes(tmp_path: Path) -> None:
    """Inotify makes every write to the database's files pay for the watch (~25 µs a commit),
    so while writes go on a mount on SQLite looks for changes every 50 ms without its watch,
    and listens again once they stop. Changes made elsewhere show within a second throughout."""
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    service = MemoryService(make_engine(url), actor="api")
    store = service.create_store("Busy").id
    session = service.create_session([{"memory_store_id": store}])
    stop = threading.Event()

    def write(root: Path) -> None:
        i = 0
        while not stop.is_set():
            (root / f"w{i % 20}.md").write_text(f"save {i}\n")
            i += 1

    try:
        with mounted(url, session.id, tmp_path / "mnt") as daemon:
            root, pid = daemon.root / "busy", daemon.process.pid
            assert wait_for(lambda: _inotify_watches(pid) == 1, timeout=3.0)  # idle: listening
            writer = threading.Thread(target=write, args=(root,))
            writer.start()
            try:
                time.sleep(0.2)
                samples = []
                for _ in range(10):
                    samples.append(_inotify_watches(pid))
                    time.sleep(0.05)
                # It listens again once a second and hears the next save at once.
                assert samples.count(0) >= 8, samples
                service.create_memory(store, "/elsewhere.md", "during\n", actor="cli")
                assert wait_for((root / "elsewhere.md").exists, timeout=1.0)
            finally:
                stop.set()
                writer.join()
            assert wait_for(lambda: _inotify_watches(pid) == 1, timeout=3.0)
            service.create_memory(store, "/after.md", "after\n", actor="cli")
            assert wait_for((root / "after.md").exists, timeout=0.5)
    finally:
        service.close()


def test_a_watch_that_cannot_listen_again_gives_way_to_polling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The folder went away while the watch was paused: the mount says so and polls from then
    on (``_resume`` gives None) instead of failing its watcher at every look."""
    from mnemofs.fs.mount import _resume
    from mnemofs.inotify import FileWatch

    folder = tmp_path / "db"
    folder.mkdir()
    watch = FileWatch([str(folder / "m.db-wal"), str(folder / "m.db")])
    watch.pause()
    folder.rmdir()
    with caplog.at_level("WARNING", logger="mnemofs.mount"):
        assert _resume(watch) is None
    assert "cannot watch" in caplog.text
    assert "polling" in caplog.text
    with pytest.raises(OSError):  # closed: nothing left open
        os.fstat(watch.fileno())


def _wakeups(pid: int) -> int:
    """How often the process's threads have gone to sleep and woken up so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


@pytest.mark.mounted
def test_an_idle_mount_rests_until_its_next_request(tmp_path: Path) -> None:
    """With nothing to write, catch up or checkpoint, a mount's upkeep sleeps until its next
    request instead of looking ten times a second (idle CPU, issue 17); the requests that
    follow wake it, so a burst of saves after the rest still has its WAL started over once
    past ``WAL_CHECKPOINT_BYTES``, not left to grow until the burst ends."""
    url = f"sqlite:///{tmp_path / 'idle.db'}"
    service = MemoryService(make_engine(url), actor="api")
    store = service.create_store("Idle").id
    session = service.create_session([{"memory_store_id": store}])
    service.close()
    wal_file = tmp_path / "idle.db-wal"
    with mounted(url, session.id, tmp_path / "mnt") as daemon:
        root, pid = daemon.root / "idle", daemon.process.pid
        (root / "first.md").write_text("a save, then a rest\n")
        time.sleep(2.5)  # its catch-up and checkpoint are behind it
        before = _wakeups(pid)
        time.sleep(3.0)
        rested = _wakeups(pid) - before
        # Its change watcher still looks once a second: a few wake-ups (7 here).
        assert rested <= 15, rested  # before: 48
        sizes = []
        for i in range(1200):
            (root / f"f{i}.md").write_text(f"{i} " + "x" * 4000)
            if i % 10 == 0:
                sizes.append(wal_file.stat().st_size)
        # Rewound as under any load (14-21 MB here, as before); unwoken, it passed 70 MB.
        assert max(sizes) < 4 * wal.WAL_CHECKPOINT_BYTES, max(sizes)


def _in_database_file(path: Path, memory_path: str) -> bool:
    """Whether a plain ``cp`` of the database file (no ``-wal``) holds ``memory_path``."""
    copy = path.with_name("copy.sqlite")
    copy.unlink(missing_ok=True)
    subprocess.run(["cp", str(path), str(copy)], check=True)  # another process: no locks here
    try:
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            found = conn.execute("SELECT 1 FROM memories WHERE path = ?", (memory_path,))
            return found.fetchone() is not None
    finally:
        copy.unlink()


@pytest.mark.mounted
def test_a_resting_mount_still_copies_back_what_others_and_its_temp_files_save(
    tmp_path: Path,
) -> None:
    """A resting upkeep is woken by more than requests: a commit of another process that the
    change watcher hears, and a temp file the watcher saves once left alone, each leave the
    WAL for it to copy back, and a ``cp`` of the database file holds them within seconds."""
    path = tmp_path / "rest.db"
    url = f"sqlite:///{path}"
    service = MemoryService(make_engine(url), actor="api")
    store = service.create_store("Rest").id
    session = service.create_session([{"memory_store_id": store}])
    service.close()
    with mounted(url, session.id, tmp_path / "mnt") as daemon:
        root = daemon.root / "rest"
        (root / "first.md").write_text("a save, then a rest\n")
        time.sleep(2.5)  # copied back, primed: nothing due for a minute
        other = MemoryService(make_engine(url), actor="cli")
        other.save_file(store, "/from-cli.md", "saved elsewhere\n")
        other.close()
        assert wait_for(lambda: _in_database_file(path, "/from-cli.md"), timeout=4.0)
        time.sleep(2.5)
        with open(root / "tmpab12cd34", "w") as f:  # Python's tempfile name, never renamed
            f.write("left behind\n")
        assert wait_for(lambda: _in_database_file(path, "/tmpab12cd34"), timeout=6.0)
