"""The long poll remote mounts and sync workers wait on (``GET /mnemofs/v1/changes/wait``),
through the real server: a poll is answered when one of its own stores moves, at once if one
moved before it came, and the server looks at the revisions once for all the polls waiting,
however many."""

from __future__ import annotations

import http.client
import json
import resource
import select
import signal
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mnemofs.limits import LONG_POLLS_PER_CALLER
from mnemofs.store import Engine, MemoryService, make_engine

from .mounted import token_for
from .pgstat import number, watching
from .served import serving


class Poll(threading.Thread):
    """One long poll on ``stores`` (id -> revision), in a thread; ``answer`` once it returns."""

    def __init__(self, url: str, token: str, stores: dict[str, int], wait: float = 20) -> None:
        super().__init__(daemon=True)
        query = urllib.parse.urlencode(
            {"store_ids": list(stores), "revisions": list(stores.values()), "wait": wait},
            doseq=True,
        )
        self.request = urllib.request.Request(
            f"{url}/mnemofs/v1/changes/wait?{query}", headers={"authorization": f"Bearer {token}"}
        )
        self.answer: dict[str, Any] | None = None
        self.start()

    def run(self) -> None:
        with urllib.request.urlopen(self.request, timeout=60) as response:
            self.answer = json.loads(response.read())

    def answered(self) -> dict[str, Any]:
        self.join(timeout=10)
        assert self.answer is not None, "no answer in 10 s"
        return self.answer


def _revision(service: MemoryService, store_id: str) -> int:
    return service.store_states([store_id])[store_id].revision  # type: ignore[index]


def test_a_change_answers_the_polls_on_its_store_only(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = MemoryService(engine, actor="tests")
    mine, theirs = service.create_store("Mine").id, service.create_store("Theirs").id
    me = token_for(db_url, service.create_session([{"memory_store_id": mine}]).id)
    them = token_for(db_url, service.create_session([{"memory_store_id": theirs}]).id)
    with serving(db_url, tmp_path / "server.log") as server:
        before = {mine: _revision(service, mine)}
        waiting = [Poll(server.url, me, before), Poll(server.url, me, before)]
        other = Poll(server.url, them, {theirs: _revision(service, theirs)})
        time.sleep(0.5)  # all three wait
        assert all(p.is_alive() for p in [*waiting, other])
        service.create_memory(mine, "/note.md", "hello")
        for poll in waiting:
            answer = poll.answered()
            assert answer["changed"] == [mine]
            assert answer["states"][mine]["revision"] == _revision(service, mine)
            assert answer["states"][mine]["memory_count"] == 1
        time.sleep(0.3)  # several looks later, the other store's poll still waits
        assert other.is_alive()
        late = Poll(server.url, me, before)  # it comes knowing the old revision: answered now
        assert late.answered()["changed"] == [mine]
        service.create_memory(theirs, "/theirs.md", "theirs")
        assert other.answered()["changed"] == [theirs]
        quiet = Poll(server.url, me, {mine: _revision(service, mine)}, wait=0.3)
        assert quiet.answered() == {
            "changed": [],
            "states": {
                mine: {"revision": _revision(service, mine), "archived_at": None, "memory_count": 1}
            },
        }
    service.close()


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_waiting_polls_share_one_look(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """Twenty idle polls cost the database what one does: each used to look at its own stores
    every 50 ms (50 idle remote mounts: 36% of a core in the server, 1,000 queries a second
    in the database), counted here in the database's transactions."""
    service = MemoryService(engine, actor="tests")
    store = service.create_store("Notes").id
    token = token_for(db_url, service.create_session([{"memory_store_id": store}]).id)
    conn = watching(db_url)

    def transactions() -> int:
        return number(
            conn,
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()",
        )

    with serving(db_url, tmp_path / "server.log") as server:
        known = {store: _revision(service, store)}
        polls = [Poll(server.url, token, known, wait=8) for _ in range(20)]
        time.sleep(1.5)  # all waiting, their first looks done and counted
        before = transactions()
        time.sleep(3)
        during = transactions() - before  # 20 polls looking on their own: ~1,200
        assert all(p.is_alive() for p in polls)
        assert during < 300, during
        service.create_memory(store, "/n.md", "n")
        for poll in polls:
            assert poll.answered()["changed"] == [store]
    conn.close()
    service.close()


def _wakeups(pid: int) -> int:
    """How often the process's main thread (its event loop) has gone to sleep and been woken."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_idle_polls_leave_the_server_asleep(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """Twenty polls waiting while nothing changes wake the server's event loop about once a
    second more than it wakes anyway (uvicorn's own tick, ten times a second): the look waits
    for a commit to be heard (http/bell.py), where it ran every 50 ms (then: 60-115 more
    wake-ups in these 3 s, against 2-6 now). A change still answers them all."""
    service = MemoryService(engine, actor="tests")
    store = service.create_store("Notes").id
    token = token_for(db_url, service.create_session([{"memory_store_id": store}]).id)
    with serving(db_url, tmp_path / "server.log") as server:
        pid = server.process.pid
        time.sleep(1)
        before = _wakeups(pid)
        time.sleep(3)
        alone = _wakeups(pid) - before
        known = {store: _revision(service, store)}
        polls = [Poll(server.url, token, known, wait=15) for _ in range(20)]
        time.sleep(1.5)  # all waiting, their first looks done
        before = _wakeups(pid)
        time.sleep(3)
        waiting = _wakeups(pid) - before
        assert all(p.is_alive() for p in polls)
        assert waiting - alone < 30, (alone, waiting)
        service.create_memory(store, "/n.md", "n")
        for poll in polls:
            assert poll.answered()["changed"] == [store]
    service.close()


def test_a_graceful_stop_answers_the_polls_at_once(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """SIGTERM with a poll waiting (every remote mount keeps one): the poll is answered,
    nothing moved, and the server exits, instead of both holding to the end of the poll's
    wait while the server no longer accepts anyone."""
    service = MemoryService(engine, actor="tests")
    store = service.create_store("Notes").id
    token = token_for(db_url, service.create_session([{"memory_store_id": store}]).id)
    with serving(db_url, tmp_path / "server.log") as server:
        known = {store: _revision(service, store)}
        poll = Poll(server.url, token, known, wait=25)
        time.sleep(0.5)
        assert poll.is_alive()
        server.process.send_signal(signal.SIGTERM)
        answer = poll.answered()  # within 10 s, where its wait is 25
        assert answer["changed"] == []
        assert answer["states"][store]["revision"] == known[store]
        assert server.process.wait(timeout=10) in (0, -signal.SIGTERM)
    service.close()


def test_a_poll_whose_client_went_away_ends(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """A poll's client that closes its connection (a mount killed, a sandbox stopped) ends
    the poll at once, noted 499, rather than at the end of its wait; so a graceful stop just
    after finds nothing to wait for."""
    service = MemoryService(engine, actor="tests")
    store = service.create_store("Notes").id
    token = token_for(db_url, service.create_session([{"memory_store_id": store}]).id)
    with serving(db_url, tmp_path / "server.log") as server:
        query = urllib.parse.urlencode(
            {"store_ids": store, "revisions": _revision(service, store), "wait": 25}
        )
        url = urllib.parse.urlsplit(server.url)
        sock = socket.create_connection((url.hostname, url.port))
        sock.sendall(
            f"GET /mnemofs/v1/changes/wait?{query} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        time.sleep(0.5)  # the poll waits
        sock.close()
        path = "/mnemofs/v1/changes/wait"
        assert server.settled_count("GET", path, at_least=1) == 1  # within 5 s, not 25
        assert server.requests("GET", path)[0]["status"] == 499
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=10) in (0, -signal.SIGTERM)
    service.close()


def test_one_caller_holds_only_so_many_polls(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """Each waiting poll holds a connection, a descriptor of the server's: a sandbox's token
    that opened them without end would leave none for anyone else. Past
    ``LONG_POLLS_PER_CALLER`` a caller's poll is a 429, another caller's is served, and one
    that ends makes room."""
    service = MemoryService(engine, actor="tests")
    store = service.create_store("Notes").id
    other = service.create_store("Other").id
    token = token_for(db_url, service.create_session([{"memory_store_id": store}]).id)
    neighbour = token_for(db_url, service.create_session([{"memory_store_id": other}]).id)
    with serving(db_url, tmp_path / "server.log") as server:
        url = urllib.parse.urlsplit(server.url)
        known = {"store_ids": store, "revisions": _revision(service, store)}

        def poll(auth: str, wait: float) -> socket.socket:
            query = urllib.parse.urlencode({**known, "wait": wait})
            if auth == neighbour:
                query = urllib.parse.urlencode({"store_ids": other, "revisions": 0, "wait": 0})
            sock = socket.create_connection((url.hostname, url.port))
            sock.sendall(
                f"GET /mnemofs/v1/changes/wait?{query} HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {auth}\r\n\r\n".encode()
            )
            return sock

        def answer(sock: socket.socket) -> tuple[int, bytes]:
            sock.settimeout(10)
            response = http.client.HTTPResponse(sock)
            response.begin()
            body = response.read()
            sock.close()
            return response.status, body

        def status(sock: socket.socket) -> int:
            return answer(sock)[0]

        def until(auth: str, wanted: int) -> None:
            deadline = time.monotonic() + 10
            while (got := status(poll(auth, 0))) != wanted:
                assert time.monotonic() < deadline, f"still {got}, not {wanted}"
                time.sleep(0.1)

        # One poll more than a caller may hold: whichever the server took last is refused
        # at once, the others wait.
        held = [poll(token, 25) for _ in range(LONG_POLLS_PER_CALLER + 1)]
        deadline = time.monotonic() + 10
        while not (answered := select.select(held, [], [], 0.1)[0]):
            assert time.monotonic() < deadline, "no poll was refused"
        assert len(answered) == 1
        held.remove(answered[0])
        code, body = answer(answered[0])
        assert code == 429
        assert json.loads(body)["error"]["type"] == "rate_limit_error"
        assert f"{LONG_POLLS_PER_CALLER} long polls" in json.loads(body)["error"]["message"]
        assert not select.select(held, [], [], 0.5)[0]  # the others still wait
        assert status(poll(token, 0)) == 429
        assert status(poll(neighbour, 0)) == 200  # another session waits as before
        held.pop().close()
        until(token, 200)  # the poll that went away made room
        for sock in held:
            sock.close()
    service.close()


def test_the_server_takes_every_descriptor_it_may(tmp_path: Path) -> None:
    """A service's soft limit on descriptors is often 1,024 (systemd's default), under a hard
    limit far above: ``mnemofs serve`` raises it, so a thousand connections do not stop it
    accepting more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(1024, hard // 2)
    assert lowered < hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        db_url = f"sqlite:///{tmp_path / 'limits.db'}"
        make_engine(db_url, create=True).dispose()
        with serving(db_url, tmp_path / "server.log") as server:
            limits = Path(f"/proc/{server.process.pid}/limits").read_text()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)], line
