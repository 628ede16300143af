"""Mounts and sync workers that hold a session token, not the database (issue 15): what only
the remote backend has to get right. (The whole mounted suite also runs over it: see
``BOTH_WAYS`` in conftest.py.)"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from mnemofs import errors, remote
from mnemofs.remote import RemoteBackend
from mnemofs.store import Engine, MemoryService

from .mounted import remote_mount, token_for, wait_for
from .served import serving, start_server

pytestmark = pytest.mark.mounted


class World:
    """Two stores attached to a session (one read_only), another session with its own store."""

    def __init__(self, engine: Engine) -> None:
        self.service = MemoryService(engine, actor="tests")
        s = self.service
        self.notes = s.create_store("Notes").id
        self.docs = s.create_store("Docs").id
        self.theirs = s.create_store("Theirs").id
        s.create_memory(self.docs, "/readme.md", "read me\n")
        s.create_memory(self.theirs, "/secret.md", "not yours\n")
        self.session = s.create_session(
            [
                {"memory_store_id": self.notes},
                {"memory_store_id": self.docs, "access": "read_only"},
            ]
        )
        self.other = s.create_session([{"memory_store_id": self.theirs}])


def errno_of(fn: object, *args: object) -> int:
    try:
        fn(*args)  # type: ignore[operator]
    except OSError as exc:
        return exc.errno or 0
    return 0


def write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def append(path: Path) -> None:
    with open(path, "a") as f:
        f.write("two\n")


def test_a_token_reaches_its_own_stores_only(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """The mount's own calls, made by a process that holds the token: another session's store
    is not found, a read_only store refuses writes at the server too."""
    w = World(engine)
    with serving(db_url, tmp_path / "server.log") as server:
        backend = RemoteBackend(server.url, token_for(db_url, w.session.id))
        assert [a.memory_store_id for a in backend.own_session().resources] == [w.notes, w.docs]
        with pytest.raises(errors.NotFound):
            backend.snapshot(w.theirs)
        with pytest.raises(errors.NotFound):
            backend.find_memory(w.theirs, "/secret.md")
        with pytest.raises(errors.NotFound):
            backend.save_file(w.theirs, "/x.md", "x")
        with pytest.raises(errors.MnemofsError, match="read_only"):
            backend.save_file(w.docs, "/x.md", "x")
        mine, created = backend.save_file(w.notes, "/mine.md", "mine\n")
        assert created
        # A move with the content it expects (a sync worker's mv): refused if that is not it.
        with pytest.raises(errors.PreconditionFailed):
            backend.update_memory(w.notes, mine.id, path="/moved.md", precondition="0" * 64)
        assert w.service.get_memory(w.notes, mine.id).path == "/mine.md"
        moved = backend.update_memory(
            w.notes, mine.id, path="/moved.md", precondition=mine.content_sha256
        )
        assert (moved.id, moved.path) == (mine.id, "/moved.md")
        version = w.service.list_versions(w.notes).data[0]
        assert version.created_by is not None
        assert (version.created_by.type, version.created_by.id) == ("session_actor", w.session.id)
        backend.close()


def test_a_save_waits_out_a_server_restart(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """A server restarted (its port refusing connections for a moment): a save made meanwhile
    waits for it, the mount answering everything else, and is made once the server is back,
    as if nothing happened; so does a read of a file not cached. Without the wait both failed
    with EIO at once, the append lost."""
    w = World(engine)
    w.service.create_memory(w.docs, "/unread.md", "not read before\n")
    log = tmp_path / "server.log"
    server = start_server(db_url, log)
    port = urlsplit(server.url).port
    root = tmp_path / "mnt"
    try:
        with remote_mount(server.url, token_for(db_url, w.session.id), root) as daemon:
            notes = root / "notes"
            write(notes / "log.md", "one\n")
            assert (root / "docs" / "readme.md").read_text() == "read me\n"
            server.stop()  # its kept-alive connections closed: what a restart does
            got: list[int] = []
            saving = threading.Thread(target=lambda: got.append(errno_of(append, notes / "log.md")))
            saving.start()
            read: list[str] = []
            unread = root / "docs" / "unread.md"
            reading = threading.Thread(target=lambda: read.append(unread.read_text()))
            reading.start()
            time.sleep(0.5)
            # The mount answers meanwhile: a listing, a stat, a file already read.
            assert sorted(os.listdir(notes)) == ["log.md"]
            assert (root / "docs" / "readme.md").read_text() == "read me\n"
            assert saving.is_alive()  # still waiting for the server
            assert reading.is_alive()
            server = start_server(db_url, log, port=port)
            saving.join(timeout=30)
            reading.join(timeout=30)
            assert got == [0]
            assert read == ["not read before\n"]
            memory = w.service.find_memory(w.notes, "/log.md")
            assert memory.content == "one\ntwo\n"
            assert len(list(w.service.list_versions(w.notes, memory_id=memory.id))) == 2
            write(notes / "after.md", "saved after\n")
            assert not (root / ".mnemofs" / "refusals").read_text().strip()
            assert daemon.process.poll() is None
    finally:
        server.stop()


def test_a_server_down_fails_saves_and_the_mount_catches_up(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """While the server stays down: what the mount holds stays readable, a save fails with EIO
    (once it has waited what a restart takes) and is not acknowledged; once it is back (same
    address) the mount catches up on what changed meanwhile and saves again, no remount."""
    w = World(engine)
    log = tmp_path / "server.log"
    server = start_server(db_url, log)
    port = urlsplit(server.url).port
    root = tmp_path / "mnt"
    env_token = token_for(db_url, w.session.id)
    try:
        with remote_mount(server.url, env_token, root) as daemon:
            notes = root / "notes"
            write(notes / "kept.md", "saved before\n")
            assert (root / "docs" / "readme.md").read_text() == "read me\n"
            server.stop()
            # Listing, stat and a file already read keep working.
            assert sorted(os.listdir(notes)) == ["kept.md"]
            assert (notes / "kept.md").stat().st_size == len("saved before\n")
            assert (root / "docs" / "readme.md").read_text() == "read me\n"
            # A save cannot be acknowledged: EIO at close, and nothing is stored. Later in
            # the same outage, at once.
            assert errno_of(write, notes / "lost.md", "never acknowledged\n") == errno.EIO
            assert errno_of(write, notes / "kept.md", "nor this\n") == errno.EIO
            assert "/lost.md" not in {m.path for m in w.service.list_memories(w.notes)}
            assert (notes / "kept.md").read_text() == "saved before\n"
            refusals = (root / ".mnemofs" / "refusals").read_text()
            assert "save at close: EIO: the server is unreachable" in refusals
            # Meanwhile someone else changes the store.
            w.service.create_memory(w.notes, "/while-down.md", "made while the server was down\n")
            server = start_server(db_url, log, port=port)
            assert wait_for(lambda: (notes / "while-down.md").exists(), timeout=10)
            write(notes / "after.md", "saved after\n")
            assert w.service.find_memory(w.notes, "/after.md").content == "saved after\n"
            assert daemon.process.poll() is None
            assert "unreachable" in daemon.log.read_text()
    finally:
        server.stop()


def test_an_ended_session_is_eacces(engine: Engine, db_url: str, tmp_path: Path) -> None:
    w = World(engine)
    with serving(db_url, tmp_path / "server.log") as server:
        token = token_for(db_url, w.session.id)
        with remote_mount(server.url, token, tmp_path / "mnt") as daemon:
            notes = tmp_path / "mnt" / "notes"
            write(notes / "a.md", "before the end\n")
            w.service.end_session(w.session.id)
            assert errno_of(write, notes / "b.md", "after the end\n") == errno.EACCES
            assert errno_of(write, notes / "a.md", "after the end\n") == errno.EACCES
            assert w.service.find_memory(w.notes, "/a.md").content == "before the end\n"
            assert "refused the token" in daemon.log.read_text()
            assert token not in daemon.log.read_text()


def test_the_change_stream_wakes_its_watcher_when_the_session_ends(
    engine: Engine, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's poll refused (the session ended) wakes the watcher, whose look meets the
    refusal too: the mount then fails at once and says why. The stream used to end silently,
    and an idle mount (its watcher waits on the stream) never knew."""
    monkeypatch.setattr(remote, "WAIT_S", 0.5)  # the poll after the end comes soon
    w = World(engine)
    with serving(db_url, tmp_path / "server.log") as server:
        backend = RemoteBackend(server.url, token_for(db_url, w.session.id))
        stream = backend.listen_for_changes()
        assert stream is not None
        try:
            assert select.select([stream], [], [], 10)[0]  # its first look
            stream.drain()
            assert not select.select([stream], [], [], 1.5)[0]  # polls with nothing to say
            w.service.end_session(w.session.id)
            assert select.select([stream], [], [], 10)[0]
            with pytest.raises(errors.AccessRevoked):
                backend.store_states([w.notes])
        finally:
            stream.close()
            backend.close()


def test_a_mount_catches_up_on_many_changes_in_one_fetch(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """Another session's burst of saves reaches the mount through one request for their
    contents (``fetch``), not one request per memory; what it shows is what was saved."""
    w = World(engine)
    writer = w.service.create_session([{"memory_store_id": w.notes}])
    with serving(db_url, tmp_path / "server.log") as server:
        with remote_mount(server.url, token_for(db_url, w.session.id), tmp_path / "mnt"):
            notes = tmp_path / "mnt" / "notes"
            assert os.listdir(notes) == []  # the mount is up and has looked
            other = RemoteBackend(server.url, token_for(db_url, writer.id))
            for i in range(30):
                other.save_file(w.notes, f"/burst/{i}.md", f"note {i}\n")
            burst = notes / "burst"  # not there yet, likely: the saves take ~20 ms
            assert wait_for(lambda: burst.is_dir() and len(os.listdir(burst)) == 30, timeout=10)
            for i in range(30):
                assert (notes / "burst" / f"{i}.md").read_text() == f"note {i}\n"
            other.close()
        store = f"/mnemofs/v1/memory_stores/{w.notes}"
        fetches = server.requests("POST", f"{store}/fetch")
        assert 1 <= len(fetches) <= 30
        one_by_one = [
            r
            for r in server.lines()
            if r.get("method") == "GET" and str(r.get("path", "")).startswith(f"{store}/memories/")
        ]
        assert one_by_one == []


def test_a_cold_grep_reads_a_directory_in_a_few_requests(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A sandbox's first ``grep -r`` over its memory (every file a miss) cost a request per
    file. A directory's misses in a row read the next files of it along, more each time (4,
    8, ... 64): 300 files in a handful of requests, what was saved. A lone read reads only its
    own file, as before."""
    w = World(engine)
    for i in range(300):
        w.service.create_memory(
            w.notes, f"/many/{i:03d}.md", f"note {i}\n" + "needle\n" * (i % 50 == 7)
        )
    w.service.create_memory(w.notes, "/lone/a.md", "alone\n")
    w.service.create_memory(w.notes, "/lone/b.md", "not read\n")
    store = f"/mnemofs/v1/memory_stores/{w.notes}"

    def reads(server: Any) -> tuple[int, int]:
        """Requests so far for a memory one by one, and for many."""
        one = [
            r
            for r in server.lines()
            if r.get("method") == "GET" and str(r.get("path", "")).startswith(f"{store}/memories/")
        ]
        return len(one), len(server.requests("POST", f"{store}/fetch"))

    with (
        serving(db_url, tmp_path / "server.log") as server,
        remote_mount(server.url, token_for(db_url, w.session.id), tmp_path / "mnt"),
    ):
        notes = tmp_path / "mnt" / "notes"
        assert (notes / "lone" / "a.md").read_text() == "alone\n"
        assert wait_for(lambda: reads(server) == (1, 0))
        grep = ["grep", "-rl", "needle", str(notes / "many")]
        found = subprocess.run(grep, capture_output=True, text=True, check=True).stdout
        assert sorted(found.split()) == [str(notes / f"many/{i:03d}.md") for i in range(7, 300, 50)]
        for i in range(300):  # each as saved (read from the mount's cache now)
            assert (notes / f"many/{i:03d}.md").read_text() == f"note {i}\n" + "needle\n" * (
                i % 50 == 7
            )
        one_by_one, many = reads(server)
    assert many >= 1
    assert one_by_one + many <= 1 + 15, (one_by_one, many)


def test_a_read_that_timed_out_is_not_sent_again(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A read on a kept-alive connection that fails is sent again on a new one (the server may
    have closed it while idle); one that timed out is not: the server did not answer in time
    (gone, hung, a network dropping everything), and sending it again made a mount wait as
    long again, every request of it waiting too (measured with a server's port black-holed:
    60 s, not 30). Here the server is stopped (SIGSTOP), so it answers nothing; once it goes
    on, it finds the read it was sent once."""
    w = World(engine)
    path = "/mnemofs/v1/store_states"
    with serving(db_url, tmp_path / "server.log") as server:
        backend = RemoteBackend(server.url, token_for(db_url, w.session.id), timeout=1.0)
        backend.store_states([w.notes])  # a connection kept alive
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(errors.Unavailable, match="timed out"):
                backend.store_states([w.notes])
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert wait_for(lambda: len(server.requests("GET", path)) >= 2, timeout=10)
        backend.store_states([w.notes])  # after any copy of the one that timed out
        assert wait_for(lambda: len(server.requests("GET", path)) >= 3, timeout=10)
        assert len(server.requests("GET", path)) == 3
        backend.close()


def test_a_save_s_reply_does_not_send_its_content_back(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """The client has the content it just sent: the reply names the memory and its hash,
    and ``RemoteBackend.save_file`` returns the memory whole, as the store does."""
    w = World(engine)
    token = token_for(db_url, w.session.id)
    text = "saved once, sent once\n" * 200
    with serving(db_url, tmp_path / "server.log") as server:
        body = json.dumps({"path": "/raw.md", "content": text}).encode()
        request = urllib.request.Request(
            f"{server.url}/mnemofs/v1/memory_stores/{w.notes}/saves",
            data=body,
            method="POST",
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            reply = json.loads(response.read())
        assert reply["memory"]["content"] is None
        assert reply["memory"]["content_sha256"] == hashlib.sha256(text.encode()).hexdigest()
        backend = RemoteBackend(server.url, token)
        memory, created = backend.save_file(w.notes, "/whole.md", text)
        assert created
        assert memory == w.service.get_memory(w.notes, memory.id)
        assert memory.content == text
        backend.close()


@contextlib.contextmanager
def _settled_mount(
    engine: Engine, db_url: str, tmp_path: Path
) -> Iterator[tuple[World, Any, Path]]:
    """A world, its server, and a remote mount of its session whose first look is done: the
    mount's ``notes`` directory."""
    w = World(engine)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(serving(db_url, tmp_path / "server.log"))
        token = token_for(db_url, w.session.id)
        stack.enter_context(remote_mount(server.url, token, tmp_path / "mnt"))
        notes = tmp_path / "mnt" / "notes"
        assert os.listdir(notes) == []  # up, and its first look done
        time.sleep(0.2)
        yield w, server, notes


def test_a_mount_s_own_burst_does_not_make_it_poll_at_every_save(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """Each of the mount's own saves moves the store's revision, which answers a waiting poll
    at once: unpaced, its change stream polled about once per save (~300 a second, each a
    look for the server). A poll that heard news is followed by the next no sooner than
    ``POLL_PACE_S`` later."""
    from mnemofs.remote import POLL_PACE_S

    with _settled_mount(engine, db_url, tmp_path) as (w, server, notes):
        polls_before = len(server.requests("GET", "/mnemofs/v1/changes/wait"))
        started = time.monotonic()
        for i in range(200):
            write(notes / f"{i}.md", f"note {i}\n")
        took = time.monotonic() - started
        polls = len(server.requests("GET", "/mnemofs/v1/changes/wait")) - polls_before
    assert w.service.find_memory(w.notes, "/199.md").content == "note 199\n"
    assert polls <= took / POLL_PACE_S + 3, (polls, took)


def test_a_writing_mount_does_not_read_its_own_saves_back(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """While the mount saves, its poll answers at once (its own saves move the store), and
    each look read them back through the server: three requests on the mount's thread about
    20 times a second, 6-15% of its changes. Each change's reply now says what it left the
    store at (moves.py), and a look that finds only those takes them as seen: no feed read;
    nor the stores' states, which the poll that woke it had (``ChangeStream.heard_states``).
    A change made elsewhere meanwhile is a gap, and shows."""
    with _settled_mount(engine, db_url, tmp_path) as (w, server, notes):
        feed = f"/mnemofs/v1/memory_stores/{w.notes}/changes"
        looks_before = len(server.requests("GET", feed))
        states_before = len(server.requests("GET", "/mnemofs/v1/store_states"))
        polls_before = len(server.requests("GET", "/mnemofs/v1/changes/wait"))
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 1.0:  # saves, appends, renames, deletes
            write(notes / f"{i % 20}.md", f"note {i}\n")
            append(notes / f"{i % 20}.md")
            if i % 5 == 4:
                os.rename(notes / f"{i % 20}.md", notes / f"r{i % 20}.md")
                os.unlink(notes / f"r{i % 20}.md")
            i += 1
        time.sleep(0.3)  # the last look
        looks = len(server.requests("GET", feed)) - looks_before
        states = len(server.requests("GET", "/mnemofs/v1/store_states")) - states_before
        polls = len(server.requests("GET", "/mnemofs/v1/changes/wait")) - polls_before
        w.service.create_memory(w.notes, "/elsewhere.md", "made elsewhere\n")
        while not (notes / "elsewhere.md").exists():  # shown while the mount writes on
            assert time.monotonic() - started < 10, "a change made elsewhere never showed"
            write(notes / f"{i % 20}.md", f"note {i}\n")
            i += 1
    assert w.service.find_memory(w.notes, "/elsewhere.md").content == "made elsewhere\n"
    assert polls >= 5, polls  # heard its own saves, and looked
    assert (looks, states) == (0, 0), (looks, states, polls, i)


def test_a_change_reports_only_what_it_moved(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """A server's reply to a mount's change names what that change left its store at, and
    only that: an admin's write through the same server, right before, is not the mount's to
    take as its own (its tree would never show it)."""
    w = World(engine)
    memory = w.service.create_memory(w.notes, "/a.md", "one\n")
    key = w.service.create_api_key("admin").key
    assert key is not None

    def revision() -> int:
        return w.service.store_states([w.notes])[w.notes].revision  # type: ignore[index]

    def save(content: str) -> None:
        """As a mount saves: at once, and again a little later while a lock is taken (nothing
        changed then): SQLite's, held by another writer (most likely the search index's
        catch-up after the writes before; not traced)."""
        for attempt in range(200):
            backend.write_at_once(again=attempt > 0)
            try:
                backend.save_file(w.notes, "/a.md", content, memory_id=memory.id)
                return
            except errors.WriteWouldWait:
                time.sleep(0.01)
        raise AssertionError("the store's lock was never free")

    with serving(db_url, tmp_path / "server.log") as server:
        backend = RemoteBackend(server.url, token_for(db_url, w.session.id))
        try:
            before = revision()
            save("two\n")
            mine = revision()
            request = urllib.request.Request(
                f"{server.url}/v1/memory_stores/{w.notes}/memories/{memory.id}",
                data=json.dumps({"content": "three\n"}).encode(),
                headers={"x-api-key": key, "content-type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, timeout=10).close()
            theirs = revision()
            save("four\n")
            last = revision()
            assert before < mine < theirs < last
            kept = backend.moves._moves[w.notes]
            assert set(kept) == {mine, last}  # the admin's is not among them
            assert backend.own_moves(w.notes, before, mine) is not None
            assert backend.own_moves(w.notes, mine, last) is None  # the admin's between
        finally:
            backend.close()


def test_an_idle_remote_mount_sends_nothing_but_its_poll(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """An idle remote mount waits on its long poll, which compares revisions and so misses
    nothing: it used to look at the stores once a second besides (a request a second to the
    server from every idle sandbox). A change made elsewhere still shows, through the poll."""
    w = World(engine)
    notes = tmp_path / "mnt" / "notes"
    with (
        serving(db_url, tmp_path / "server.log") as server,
        remote_mount(server.url, token_for(db_url, w.session.id), tmp_path / "mnt"),
    ):
        assert os.listdir(notes) == []  # up, and its first look done
        time.sleep(0.5)
        before = len(server.lines())
        time.sleep(3.5)
        assert server.lines()[before:] == []
        w.service.create_memory(w.notes, "/elsewhere.md", "made elsewhere\n")
        assert wait_for(lambda: (notes / "elsewhere.md").exists(), timeout=10)


def test_a_temp_file_left_alone_in_a_remote_mount_is_saved(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A temp-named file left alone is saved after its grace period however quiet the mount
    is: its watcher wakes for it, not only for the change stream (which may say nothing for
    a minute)."""
    w = World(engine)

    def saved() -> bool:
        try:
            return w.service.find_memory(w.notes, "/draft.md.tmp").content == "left alone\n"
        except errors.NotFound:
            return False

    with (
        serving(db_url, tmp_path / "server.log") as server,
        remote_mount(server.url, token_for(db_url, w.session.id), tmp_path / "mnt"),
    ):
        write(tmp_path / "mnt" / "notes" / "draft.md.tmp", "left alone\n")
        assert wait_for(saved, timeout=15)


@pytest.mark.postgres
def test_two_servers_on_one_database(tmp_path: Path) -> None:
    """Scale-out: a change through one server reaches a mount connected to the other within a
    second, and the other way round."""
    from .conftest import _fresh_pg_engine, pg_url

    w = World(_fresh_pg_engine())
    url = pg_url()
    with (
        serving(url, tmp_path / "a.log") as a,
        serving(url, tmp_path / "b.log") as b,
    ):
        token = token_for(url, w.session.id)
        through_b = RemoteBackend(b.url, token)
        with remote_mount(a.url, token, tmp_path / "mnt"):
            notes = tmp_path / "mnt" / "notes"
            through_b.save_file(w.notes, "/via-b.md", "through server b\n")
            assert wait_for(lambda: (notes / "via-b.md").exists(), timeout=1.0)
            assert (notes / "via-b.md").read_text() == "through server b\n"
            write(notes / "via-a.md", "through server a\n")
            assert through_b.find_memory(w.notes, "/via-a.md").content == "through server a\n"
        assert b.requests("POST", f"/mnemofs/v1/memory_stores/{w.notes}/saves")
        through_b.close()


def test_sync_over_http(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """The same reconcile through the server: the worker holds a token file, no database."""
    w = World(engine)
    with serving(db_url, tmp_path / "server.log") as server:
        token_file = tmp_path / "token"
        token_file.write_text(token_for(db_url, w.session.id))
        token_file.chmod(0o600)
        root = tmp_path / "memory"
        argv = [sys.executable, "-m", "mnemofs", "sync", "--server", server.url]
        argv += ["--token-file", str(token_file), "--root", str(root), "--once"]
        env = {k: v for k, v in os.environ.items() if k != "MNEMOFS_DB"}

        def once() -> str:
            done = subprocess.run(argv, capture_output=True, text=True, env=env)
            assert done.returncode == 0, done.stderr
            return done.stdout + done.stderr

        assert "synced 2 store(s)" in once()
        assert (root / "docs" / "readme.md").read_text() == "read me\n"
        (root / "notes" / "n.md").write_text("from the sandbox\n")
        (root / "docs" / "readme.md").chmod(0o600)
        (root / "docs" / "readme.md").write_text("tampered\n")
        second = once()
        assert "discarded" in second, second
        assert w.service.find_memory(w.notes, "/n.md").content == "from the sandbox\n"
        assert (root / "docs" / "readme.md").read_text() == "read me\n"  # read_only: restored
        assert w.service.find_memory(w.docs, "/readme.md").content == "read me\n"
        version = w.service.list_versions(w.notes).data[0]
        assert version.created_by is not None
        assert version.created_by.id == w.session.id
        made = w.service.find_memory(w.notes, "/n.md")
        (root / "notes" / "n.md").rename(root / "notes" / "m.md")
        assert "1 moved" in once()
        assert w.service.find_memory(w.notes, "/m.md").id == made.id
        (root / "notes" / "empty").mkdir()
        assert "1 directories made" in once()
        assert w.service.explicit_directories(w.notes) == ["/empty/"]
        state = json.loads((tmp_path / ".memory.mnemofs-sync.json").read_text())
        assert state["session"] == w.session.id
        assert token_file.read_text() not in (tmp_path / "server.log").read_text()


def test_usage_errors(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "mnemofs"]
    env = {k: v for k, v in os.environ.items() if k not in ("MNEMOFS_TOKEN", "MNEMOFS_SERVER")}
    cases = [
        (["mount", "--server", "http://127.0.0.1:1", "--root", str(tmp_path)], "session token"),
        (["mount", "--token", "x", "--root", str(tmp_path)], "go with --server"),
        (["sync", "--server", "ftp://x", "--token", "t", "--once"], "http(s) URL"),
    ]
    for args, words in cases:
        done = subprocess.run(base + args, capture_output=True, text=True, env=env)
        assert done.returncode != 0
        assert words in done.stderr, done.stderr


def test_reads_noted_for_one_store_never_touch_another(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A token may name any memory id in the reads it reports; only its own store's count."""
    w = World(engine)
    theirs = w.service.find_memory(w.theirs, "/secret.md", count_access=False)

    def accessed(memory_id: str) -> object:
        return w.service._read(
            lambda tx: tx.scalar(
                "SELECT accessed_at FROM memories WHERE id = :id", {"id": memory_id}
            )
        )

    before = accessed(theirs.id)
    with serving(db_url, tmp_path / "server.log") as server:
        backend = RemoteBackend(server.url, token_for(db_url, w.session.id))
        time.sleep(0.01)
        backend.note_access(w.notes, theirs.id)  # its own store's id, another store's memory
        backend.flush_accesses()
        backend.save_file(w.notes, "/flush.md", "a write flushes the noted reads\n")
        backend.close()
    assert accessed(theirs.id) == before
