"""A write that finds a lock taken by another process or transaction (SQLite's write lock; on
PostgreSQL a store's row) is made again after a pause, and whoever made it serves others
meanwhile: the server's loop (test_http_bounds.py), a mount's thread (here), a remote mount's
through its server (here). After ``Patience.LOCKED_S`` its last try is refused by the store,
nothing changed."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from mnemofs import errors
from mnemofs.errors import Patience, WriteWouldWait
from mnemofs.fs import adapter as adapter_module
from mnemofs.fs.access import Owner
from mnemofs.fs.adapter import Adapter
from mnemofs.fs.core import ROOT_INO, MemoryFs
from mnemofs.remote import RemoteBackend
from mnemofs.store import MemoryService, make_engine

from .mounted import mounted, token_for, wait_for
from .served import serving
from .test_adapter import OWNER, Ctx, code

HOLD_S = 5.0  # how long a test's other writer holds the lock at most
# A mount on the database, and one through the server (conftest.py's ``mount_via``): there a
# change made at once is the server's (errors.WRITE_AT_ONCE_HEADER), the pause the mount's.
BOTH_WAYS = pytest.mark.parametrize("mount_via", ["local", "remote"], indirect=True)


class Holder:
    """Another connection holding what a store's writes need: SQLite's write lock, or on
    PostgreSQL the store's row. Released by ``release``, or by a timer after ``HOLD_S``: a
    test whose writer waits fails, it does not hang."""

    def __init__(self, url: str, store_id: str) -> None:
        self._guard = threading.Lock()
        self._store = store_id
        self._sqlite = url.startswith("sqlite")
        self._conn: Any
        if self._sqlite:
            path = url.removeprefix("sqlite:///")
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        else:
            self._conn = make_engine(url, check_schema=False).connect()
            self._conn.autocommit = True
        self.holding = False
        self._timer: threading.Timer | None = None

    def hold(self) -> None:
        if self._sqlite:
            self._conn.execute("BEGIN IMMEDIATE")
        else:
            self._conn.execute("BEGIN")
            self._conn.execute(
                "SELECT 1 FROM memory_stores WHERE id = %s FOR UPDATE", (self._store,)
            )
        self.holding = True
        self._timer = threading.Timer(HOLD_S, self.release)
        self._timer.start()

    def release(self) -> None:
        with self._guard:
            if self._timer is not None:
                self._timer.cancel()
            if self.holding:
                self._conn.execute("COMMIT")
                self.holding = False

    def close(self) -> None:
        self.release()
        with self._guard:
            self._conn.close()


def _refused_at_once(writer: MemoryService | RemoteBackend, store: str) -> None:
    """The lock held, a save at once (``writer.write_at_once``) raises ``WriteWouldWait``,
    and its last try ``Unavailable``; neither changes anything (the caller looks)."""
    writer.write_at_once()
    with pytest.raises(WriteWouldWait):
        writer.save_file(store, "/a.md", "not now\n")
    writer.write_at_once(last=True)
    with pytest.raises(errors.Unavailable, match="locked by another writer"):
        writer.save_file(store, "/a.md", "not now\n")


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_write_at_once_on_postgres_does_nothing_rather_than_wait_for_a_row(
    service: MemoryService, db_url: str
) -> None:
    """On PostgreSQL the lock a write waits for is a row's: another transaction on the store
    (a restore, a prune). A write at once gives up after ``AT_ONCE_LOCK_WAIT_MS``, nothing
    done; its last try is ``Unavailable``; a plain write waits, as ever. (SQLite's own:
    test_wal.py.)"""
    store = service.create_store("Rows").id
    holder = Holder(db_url, store)
    try:
        holder.hold()
        _refused_at_once(service, store)
        assert service.list_memories(store).data == []
        other = service.create_store("Other").id  # another store's row is free
        service.write_at_once()
        service.create_memory(other, "/b.md", "at once\n")
        threading.Timer(0.3, holder.release).start()
        service.create_memory(store, "/a.md", "waited\n")  # not at once: it waits
        assert service.find_memory(store, "/a.md").content == "waited\n"
    finally:
        holder.close()


async def _adapter_on(service: MemoryService, store: str, slug: bytes) -> tuple[Adapter, int]:
    """A mount's adapter, in this process, of a session attaching ``store``; its directory."""
    session = service.create_session([{"memory_store_id": store}], mount_root="/m")
    adapter = Adapter(MemoryFs(service, session, actor=session.id), Owner(OWNER, OWNER))
    return adapter, (await adapter.lookup(ROOT_INO, slug, Ctx())).st_ino


@pytest.mark.trio
async def test_a_save_locked_out_too_long_fails_and_puts_the_file_back(
    service: MemoryService, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the lock has been taken for ``Patience.LOCKED_S``, a close that saves is EIO, the
    file back as saved and the store as it was, as a busy timeout left them; the next save,
    the lock free, is made."""
    monkeypatch.setattr(Patience, "LOCKED_S", 0.3)
    store = service.create_store("Notes").id
    service.create_memory(store, "/a.md", "alpha\n")
    adapter, notes = await _adapter_on(service, store, b"notes")
    a = await adapter.lookup(notes, b"a.md", Ctx())
    holder = Holder(db_url, store)
    try:
        info = await adapter.open(a.st_ino, os.O_WRONLY | os.O_TRUNC, Ctx())
        await adapter.write(info.fh, 0, b"never saved\n")
        holder.hold()
        assert await code(adapter.flush(info.fh)) == errno.EIO
        assert holder.holding
        holder.release()
        await adapter.release(info.fh)
        info = await adapter.open(a.st_ino, os.O_RDONLY, Ctx())
        assert await adapter.read(info.fh, 0, 100) == b"alpha\n"
        await adapter.release(info.fh)
        assert service.find_memory(store, "/a.md").content == "alpha\n"
        info = await adapter.open(a.st_ino, os.O_WRONLY | os.O_TRUNC, Ctx())
        await adapter.write(info.fh, 0, b"saved\n")
        await adapter.flush(info.fh)
        await adapter.release(info.fh)
        assert service.find_memory(store, "/a.md").content == "saved\n"
    finally:
        holder.close()


@pytest.mark.trio
async def test_while_a_change_pauses_for_a_lock_every_try_asks_briefly(
    service: MemoryService, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one change of a mount pauses for a lock, every other change's first try asks for
    it briefly too (``write_at_once(again=True)``: 1 ms on PostgreSQL, not 50): the lock is
    known to be taken, and each try of 50 ms held the mount's thread. Once nothing pauses, a
    first try is a first try again."""
    store = service.create_store("Brief").id
    adapter, root = await _adapter_on(service, store, b"brief")
    asked: list[bool] = []
    at_once = service.write_at_once
    news = [trio.Event()]

    def noted(on: bool = True, *, again: bool = False, last: bool = False) -> None:
        if on:
            asked.append(again)
            news[0].set()
        at_once(on, again=again, last=last)

    async def until(done: Callable[[], bool]) -> None:
        while not done():
            news[0] = trio.Event()
            await news[0].wait()

    monkeypatch.setattr(service, "write_at_once", noted)
    holder = Holder(db_url, store)
    try:
        holder.hold()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(adapter.mkdir, root, b"first", 0o755, Ctx())
            await until(lambda: True in asked)  # it found the lock taken and pauses
            asked.clear()
            nursery.start_soon(adapter.mkdir, root, b"second", 0o755, Ctx())
            await until(lambda: len(asked) >= 3)
            assert all(asked), asked  # the second's first try too
            holder.release()
        asked.clear()
        await adapter.mkdir(root, b"third", 0o755, Ctx())
        assert asked == [False]
    finally:
        holder.close()
    assert {d.rstrip("/") for d in service.explicit_directories(store)} == {
        "/first",
        "/second",
        "/third",
    }


@pytest.mark.trio
async def test_many_changes_waiting_ask_for_the_lock_about_as_often_as_one(
    service: MemoryService, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each try of a waiting change holds the mount's thread (on PostgreSQL a 1 ms wait for
    the row, through a server a whole request): sixteen waiting changes pause about sixteen
    times longer each, so the lock is asked for about as often as by one (with a pause of 50 ms
    each, 1.5 s of waiting was ~35 tries a change, ~560 in all). Then every one is made."""
    store = service.create_store("Crowd").id
    adapter, root = await _adapter_on(service, store, b"crowd")
    tries: list[bool] = []
    at_once = service.write_at_once

    def noted(on: bool = True, *, again: bool = False, last: bool = False) -> None:
        if on:
            tries.append(again)
        at_once(on, again=again, last=last)

    monkeypatch.setattr(service, "write_at_once", noted)
    holder = Holder(db_url, store)
    try:
        holder.hold()
        async with trio.open_nursery() as nursery:
            for n in range(16):
                nursery.start_soon(adapter.mkdir, root, f"d{n}".encode(), 0o755, Ctx())
            await trio.sleep(1.5)
            assert holder.holding
            waiting = len(tries)
            holder.release()
    finally:
        holder.close()
    assert 16 * 3 <= waiting <= 16 * 12, waiting  # each paused a few times, not ~35
    assert len(service.explicit_directories(store)) == 16


@pytest.mark.trio
async def test_the_first_waiting_change_made_wakes_the_others(
    service: MemoryService, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a change that waited for the lock is made, the lock is free: every other change
    waiting is made at once, not when its own pause (up to ``CROWD_PAUSE_MAX_S`` among many)
    runs out. Here eight pause 60 s; a ninth, pausing 1 ms, is made once the lock is let go,
    and the eight with it."""
    monkeypatch.setattr(adapter_module, "CROWD_PAUSE_MAX_S", 60.0)
    made: list[Patience] = []
    paused = {8: trio.Event(), 9: trio.Event()}

    def long_then_short(self: Patience) -> float:
        if self not in made:
            made.append(self)
            if len(made) in paused:
                paused[len(made)].set()
        return 60.0 if made.index(self) < 8 else 0.001

    monkeypatch.setattr(Patience, "pause", long_then_short)
    store = service.create_store("Woken").id
    adapter, root = await _adapter_on(service, store, b"woken")
    holder = Holder(db_url, store)
    try:
        holder.hold()
        with trio.fail_after(20):  # not the eight's 60 s
            async with trio.open_nursery() as nursery:
                for n in range(8):
                    nursery.start_soon(adapter.mkdir, root, f"slow{n}".encode(), 0o755, Ctx())
                await paused[8].wait()
                nursery.start_soon(adapter.mkdir, root, b"quick", 0o755, Ctx())
                await paused[9].wait()
                holder.release()
    finally:
        holder.close()
    assert len(service.explicit_directories(store)) == 9


def test_a_remote_change_made_at_once_comes_back_rather_than_wait(
    service: MemoryService, db_url: str, tmp_path: Path
) -> None:
    """A remote mount's change made at once (its request says so: ``WRITE_AT_ONCE_HEADER``)
    is made once by the server with its first write at once: a lock taken comes back as
    ``WriteWouldWait``, nothing done, and the backend is not taken for down; its last try is
    ``Unavailable``. Only the first change request asks; one that does not waits at the server
    for the lock, as ever."""
    store = service.create_store("Far").id
    session = service.create_session([{"memory_store_id": store}])
    holder = Holder(db_url, store)
    try:
        with serving(db_url, tmp_path / "server.log") as server:
            backend = RemoteBackend(server.url, token_for(db_url, session.id))
            holder.hold()
            _refused_at_once(backend, store)
            assert backend.unavailable is None  # answered, not lost
            assert service.list_memories(store).data == []
            holder.release()
            backend.write_at_once()
            backend.make_directory(store, "/d")  # the lock free: made, and the ask used up
            holder.hold()
            threading.Timer(0.3, holder.release).start()
            backend.save_file(store, "/a.md", "waited\n")  # it waits, as ever
            assert not holder.holding
            backend.write_at_once()
            backend.write_at_once(False)  # a call that sent nothing
            holder.hold()
            threading.Timer(0.3, holder.release).start()
            backend.save_file(store, "/a.md", "waited too\n")
            assert service.find_memory(store, "/a.md").content == "waited too\n"
    finally:
        holder.close()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_writes_waiting_for_a_row_hold_up_no_other_request_of_the_server(
    service: MemoryService, db_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL a server calls the store on ``--connections`` threads. Writes to a store
    whose row another transaction holds (its restore, its prune) each kept a thread while it
    waited: as many of them as threads, and every other request of the server waited too, for
    any store. Now a write that would wait gives its thread back, and is made again after a
    pause: the others are answered meanwhile; each write is made once the row is free."""
    busy = service.create_store("Busy").id
    calm = service.create_store("Calm").id
    kept = service.create_memory(calm, "/kept.md", "read meanwhile\n")
    key = service.create_api_key("tests").key
    auth = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    holder = Holder(db_url, busy)
    answers: list[object] = []
    try:
        with serving(db_url, tmp_path / "server.log", args=("--connections", "2")) as server:
            stores = f"{server.url}/v1/memory_stores"

            def save(n: int) -> None:
                body = json.dumps({"path": f"/w{n}.md", "content": f"waited {n}\n"}).encode()
                request = urllib.request.Request(f"{stores}/{busy}/memories", body, auth)
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        answers.append(answer.status)
                except urllib.error.HTTPError as exc:  # what it was told, in the failure
                    answers.append((exc.code, exc.read().decode()))

            holder.hold()
            saves = [threading.Thread(target=save, args=(n,)) for n in range(3)]
            for thread in saves:
                thread.start()
            time.sleep(1)  # each has reached the server and waits for the row
            read = urllib.request.Request(f"{stores}/{calm}/memories/{kept.id}", headers=auth)
            with urllib.request.urlopen(read, timeout=15) as answer:
                assert json.loads(answer.read())["content"] == "read meanwhile\n"
            assert holder.holding  # answered while the writes waited
            assert answers == []
            assert all(t.is_alive() for t in saves)
            holder.release()
            for thread in saves:
                thread.join(60)
            assert answers == [200, 200, 200]
    finally:
        holder.close()
    made = {m.path: m.content for m in service.list_memories(busy, view="full").data}
    assert made == {f"/w{n}.md": f"waited {n}\n" for n in range(3)}


def _read_a_little(root: Path) -> list[str]:
    """Requests that reach the daemon whatever the kernel keeps: an open, a listing, a
    temporary file made and gone (a change that writes nothing to the store)."""
    with open(root / "keep.md") as f:
        seen = [f.read()]
    seen.append(",".join(sorted(os.listdir(root))))
    (root / "scratch.swp").write_text("swap\n")
    (root / "scratch.swp").unlink()
    return seen


def _read_meanwhile(root: Path) -> list[list[str]]:
    """``_read_a_little`` on a thread of its own: what it read, or nothing if it has not
    finished once the lock is let go at the latest (it waited)."""
    reads: list[list[str]] = []
    reading = threading.Thread(target=lambda: reads.append(_read_a_little(root)))
    reading.start()
    reading.join(HOLD_S + 5)
    return reads


@pytest.mark.mounted
@BOTH_WAYS
def test_a_change_waiting_for_a_lock_holds_up_no_other_request(
    service: MemoryService, db_url: str, tmp_path: Path
) -> None:
    """While another process holds the lock a change needs (a CLI's import of a whole store
    holds SQLite's for seconds; a restore holds a store's row on PostgreSQL), a change through
    the mount waits for it, and returns once made, once; the mount meanwhile serves its other
    requests: they used to wait with it, every one of them, on the daemon's one thread. Every
    kind of change that writes, in turn (each must leave the tree as it was when it found the
    lock taken: it is made again). The reads are in another directory: the kernel keeps a
    directory's readers out while a name in it changes, on any filesystem."""
    store = service.create_store("Waits").id
    for path, text in (("/keep.md", "kept\n"), ("/w/a.md", "alpha\n"), ("/w/b.md", "beta\n")):
        service.create_memory(store, path, text)
    session = service.create_session([{"memory_store_id": store}])
    holder = Holder(db_url, store)

    def while_locked(change: Callable[[], object], root: Path, waits: bool = True) -> None:
        """``waits``: the call returns only once the change is made (not a close whose save
        is at the release the kernel sends after it returned)."""
        holder.hold()
        try:
            changing = threading.Thread(target=change)
            changing.start()
            time.sleep(0.3)
            assert changing.is_alive() == waits  # it cannot be made while the lock is held
            assert _read_meanwhile(root) == [["kept\n", "keep.md,w"]]  # answered...
            assert holder.holding  # ...while the change waited
            assert changing.is_alive() == waits
            holder.release()
            changing.join(30)
            assert not changing.is_alive()
        finally:
            holder.release()

    try:
        with mounted(db_url, session.id, tmp_path / "mnt") as daemon:
            root = daemon.root / "waits"
            w = root / "w"
            changes: list[Callable[[], object]] = [
                lambda: (w / "new.md").write_text("new\n"),  # a save at close (flush)
                lambda: (w / "a.md").open("a").write("more\n"),  # an append
                lambda: os.rename(w / "a.md", w / "a2.md"),
                lambda: os.rename(w / "c.tmp", w / "c.md"),  # a temporary file saved at last
                lambda: subprocess.run(["sed", "-i", "s/beta/BETA/", str(w / "b.md")]),
                lambda: os.truncate(w / "a2.md", 3),  # truncate(2): a save of its own
                lambda: os.mkdir(w / "d"),
                lambda: os.rmdir(w / "d"),
                lambda: os.unlink(w / "new.md"),
            ]
            (w / "c.tmp").write_text("c\n")  # never saved while its name is a temporary one
            for change in changes:
                while_locked(change, root)
            assert service.find_memory(store, "/w/b.md").content == "BETA\n"
            while_locked(lambda: open(w / "b.md", "w").close(), root, waits=False)
            # (truncated at the open, saved at the release)
            assert wait_for(lambda: service.find_memory(store, "/w/b.md").content == "")
            assert daemon.process.poll() is None
        saved = service.list_memories(store, view="full").data
        assert {m.path: m.content for m in saved} == {
            "/keep.md": "kept\n",
            "/w/a2.md": "alp",
            "/w/b.md": "",
            "/w/c.md": "c\n",
        }
        made = [(v.operation, v.path) for v in reversed(service.list_versions(store).data)]
        assert made[3:] == [
            ("created", "/w/new.md"),
            ("modified", "/w/a.md"),
            ("modified", "/w/a2.md"),
            ("created", "/w/c.md"),
            ("modified", "/w/b.md"),
            ("modified", "/w/a2.md"),
            ("deleted", "/w/new.md"),
            ("modified", "/w/b.md"),
        ], made
    finally:
        holder.close()


@pytest.mark.mounted
@BOTH_WAYS
def test_many_changes_waiting_for_a_lock_hold_up_no_other_request(
    service: MemoryService, db_url: str, tmp_path: Path
) -> None:
    """Thirty-two programs saving into one mount while the lock is taken: each change waits,
    pausing, and the mount still answers the others; then every save is made, once."""
    store = service.create_store("Many").id
    service.create_memory(store, "/keep.md", "kept\n")
    session = service.create_session([{"memory_store_id": store}])
    holder = Holder(db_url, store)
    try:
        with mounted(db_url, session.id, tmp_path / "mnt") as daemon:
            root = daemon.root / "many"
            (root / "w").mkdir()
            holder.hold()
            savers = [
                threading.Thread(target=(root / "w" / f"s{n}.md").write_text, args=(f"{n}\n",))
                for n in range(32)
            ]
            for saver in savers:
                saver.start()
            time.sleep(0.5)
            assert all(saver.is_alive() for saver in savers)
            for _ in range(3):  # (on PostgreSQL each try of each change held the thread 50 ms)
                assert _read_meanwhile(root) == [["kept\n", "keep.md,w"]]  # answered...
            assert holder.holding  # ...while every change waited
            holder.release()
            for saver in savers:
                saver.join(30)
            assert not any(saver.is_alive() for saver in savers)
        made = [v.path for v in service.list_versions(store, limit=100).data]
        assert sorted(made) == sorted(["/keep.md"] + [f"/w/s{n}.md" for n in range(32)])
    finally:
        holder.close()


@pytest.mark.mounted
@BOTH_WAYS
def test_a_mount_told_to_stop_while_a_change_waits_makes_it_and_stops(
    service: MemoryService, db_url: str, tmp_path: Path
) -> None:
    """SIGTERM while a save waits for the lock (its spare task serving the mount): the save
    is made once the lock is free, its close returns 0, and the daemon unmounts and exits."""
    store = service.create_store("Stops").id
    session = service.create_session([{"memory_store_id": store}])
    holder = Holder(db_url, store)
    try:
        with mounted(db_url, session.id, tmp_path / "mnt") as daemon:
            root = daemon.root / "stops"
            holder.hold()
            closed: list[str] = []

            def save() -> None:
                (root / "late.md").write_text("saved late\n")
                closed.append("ok")

            saving = threading.Thread(target=save)
            saving.start()
            time.sleep(0.3)
            assert saving.is_alive()
            assert os.listdir(root) == ["late.md"]  # served meanwhile: a spare task reads
            assert holder.holding  # (answered while the lock was held, not once it was free)
            assert saving.is_alive()
            daemon.process.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            assert daemon.process.poll() is None  # the save is not given up
            holder.release()
            saving.join(30)
            assert closed == ["ok"]
            assert daemon.process.wait(timeout=30) == 0
        assert service.find_memory(store, "/late.md").content == "saved late\n"
    finally:
        holder.close()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_read_waits_for_a_lock_whatever_wrote_at_once_before_it(
    service: MemoryService, db_url: str
) -> None:
    """On PostgreSQL a write at once makes its connection give up on a lock after
    ``AT_ONCE_LOCK_WAIT_MS`` (set once on the connection; its other writes lift it for their
    own transaction). Reads made on it later gave up too: one that waited for a table's lock
    (``db scrub``'s VACUUM FULL, a migration, the catalog's own) was refused
    ``Unavailable`` after 50 ms, a 503 to a server's client, where a read on any other
    connection waited. It waits, as every read does."""
    store = service.create_store("Read").id
    kept = service.create_memory(store, "/kept.md", "kept\n")
    service.write_at_once()
    service.create_memory(store, "/b.md", "b\n")  # made at once: this thread's connection too
    conn = make_engine(db_url, check_schema=False).connect()
    conn.autocommit = True
    try:
        conn.execute("BEGIN")
        conn.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        released = threading.Event()

        def release() -> None:
            released.set()  # before the COMMIT: the read cannot end before this
            conn.execute("COMMIT")

        releaser = threading.Timer(0.3, release)
        releaser.start()
        assert service.find_memory(store, "/kept.md").content == "kept\n"
        assert released.is_set()  # the read waited for the lock
        releaser.join()  # the connection is ours again
        service.write_at_once()  # and a write at once still gives up on it
        conn.execute("BEGIN")
        conn.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(WriteWouldWait):
            service.create_memory(store, "/c.md", "c\n")
        conn.execute("COMMIT")
        assert service.find_memory(store, kept.path).id == kept.id
        paths = [m.path for m in service.list_memories(store).data]
        assert paths == ["/b.md", "/kept.md"]  # the write that gave up made nothing
    finally:
        conn.close()
