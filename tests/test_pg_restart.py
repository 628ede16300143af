"""PostgreSQL restarted under a mount: a save made while it restarts waits for it and is made,
one made while it stays down fails with EIO, acknowledged saves survive, what the mount already
holds is still served, and the daemon reconnects by itself.

This test runs its own PostgreSQL server (the one scripts/test starts is shared by the suite
and must not be restarted), from the same Debian packages.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemofs import errors
from mnemofs.store import MemoryService, make_engine

from .conftest import SKIP_PG_ENV
from .mounted import mounted, remote_mount, wait_for
from .served import start_server

pytestmark = [pytest.mark.mounted, pytest.mark.postgres]


class PgServer:
    """A throwaway PostgreSQL cluster on a Unix socket that a test may stop and start."""

    def __init__(self) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not found:
            if os.environ.get(SKIP_PG_ENV) == "1":
                pytest.skip(f"PostgreSQL tests skipped: {SKIP_PG_ENV}=1")
            pytest.fail("PostgreSQL's server programs are missing: run through scripts/test")
        self.bin = found[-1].parent
        self.dir = Path(tempfile.mkdtemp(prefix="mnemofs-pg-"))
        self.as_owner: list[str] = []
        if os.getuid() == 0:  # the server refuses to run as root
            shutil.chown(self.dir, "postgres")
            self.as_owner = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql+psycopg://mnemofs@/mnemofs?host={self.dir}"
        self._run(
            "initdb",
            "-D",
            f"{self.dir}/data",
            "-U",
            "mnemofs",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        self.start()
        self._run("createdb", "-h", str(self.dir), "-U", "mnemofs", "mnemofs")

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self.as_owner, str(self.bin / program), *args], check=True, capture_output=True
        )

    def start(self) -> None:
        options = f"-k {self.dir} -c listen_addresses='' -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            f"{self.dir}/data",
            "-l",
            f"{self.dir}/log",
            "-w",
            "-o",
            options,
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", f"{self.dir}/data", "-m", mode, "-w", "stop")

    def remove(self) -> None:
        subprocess.run(
            [
                *self.as_owner,
                str(self.bin / "pg_ctl"),
                "-D",
                f"{self.dir}/data",
                "-m",
                "immediate",
                "stop",
            ],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    try:
        yield server
    finally:
        server.remove()


# Saves in a loop until told to stop, going on after failures; prints every outcome.
WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    folder, stop = sys.argv[1], sys.argv[2]
    out, i = [], 0
    while not os.path.exists(stop):
        i += 1
        text = f"save {i}\\n"
        try:
            with open(os.path.join(folder, f"w-{i % 3}.md"), "w") as f:
                f.write(text)
            out.append([text, 0])
        except OSError as exc:
            out.append([text, exc.errno])
        time.sleep(0.01)
    print(json.dumps(out))
    """
)


def save(path: Path, text: str) -> int:
    """Save through the mount; 0 or the errno the save failed with."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        return exc.errno or -1
    return 0


def test_postgres_restart_under_a_mount(pg_server: PgServer, tmp_path: Path) -> None:
    engine = make_engine(pg_server.url)
    service = MemoryService(engine, actor="api")
    store = service.create_store("Restarted").id
    service.create_memory(store, "/kept.md", "kept\n")
    service.create_memory(store, "/unread.md", "not read before\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    service.close()  # its connections would only break with the server
    folder = root / "restarted"
    stop_file = tmp_path / "stop"

    with mounted(pg_server.url, session.id, root) as daemon:
        assert (folder / "kept.md").read_text() == "kept\n"  # now in the mount's cache
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(folder), str(stop_file)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(1.0)
            # A restart: a save made while it is down waits for it, and is made once it is
            # back; what the mount holds is served meanwhile.
            pg_server.stop()
            got: list[int] = []
            saving = threading.Thread(target=lambda: got.append(save(folder / "during.md", "d\n")))
            saving.start()
            read: list[str] = []
            unread = folder / "unread.md"
            reading = threading.Thread(target=lambda: read.append(unread.read_text()))
            reading.start()
            time.sleep(0.5)
            assert "kept.md" in os.listdir(folder)
            assert (folder / "kept.md").read_text() == "kept\n"
            assert saving.is_alive()  # still waiting for the database
            assert reading.is_alive()  # a file not cached: waiting too
            pg_server.start()
            saving.join(timeout=30)
            reading.join(timeout=30)
            assert got == [0]
            assert read == ["not read before\n"]
            # Down for longer than a restart takes: a save is refused with EIO (after that
            # wait; later in the outage at once), and what the mount holds is still served.
            pg_server.stop()
            assert save(folder / "down.md", "not saved\n") == errno.EIO
            assert save(folder / "kept.md", "not saved either\n") == errno.EIO
            assert sorted(os.listdir(folder))[:2] == ["during.md", "kept.md"]
            assert unread.read_text() == "not read before\n"  # cached now
            assert (folder / "kept.md").read_text() == "kept\n"  # the failed save left it
            assert os.stat(folder / "kept.md").st_size == 5
            pg_server.start()
            # Back: the same daemon saves again, without a remount.
            assert wait_for(lambda: save(folder / "after.md", "after\n") == 0, timeout=15.0)
            time.sleep(0.5)
        finally:
            stop_file.touch()
            out, _ = writer.communicate(timeout=60)
        outcomes = json.loads(out)
        assert daemon.process.poll() is None  # never restarted

        service = MemoryService(make_engine(pg_server.url), actor="api")
        # Changes made elsewhere reach the mount again (its listener reconnected).
        service.update_memory(store, service.find_memory(store, "/kept.md").id, content="new\n")
        assert wait_for(lambda: (folder / "kept.md").read_text() == "new\n", timeout=2.0)

    acked = [text for text, code in outcomes if code == 0]
    failed = [text for text, code in outcomes if code != 0]
    assert {code for _, code in outcomes} <= {0, errno.EIO}
    assert failed, "the writer never failed while the server was down for long"
    first_failure = next(i for i, (_, code) in enumerate(outcomes) if code)
    assert any(code == 0 for _, code in outcomes[first_failure:]), "no save after the restart"
    saved = {
        service.get_version(store, v.id).content
        for v in service.list_versions(store)
        if v.path.startswith("/w-")
    }
    assert set(acked) <= saved  # every acknowledged save survived
    assert saved <= set(acked) | set(failed)  # and nothing else appeared
    assert service.find_memory(store, "/after.md").content == "after\n"
    assert service.find_memory(store, "/during.md").content == "d\n"
    with pytest.raises(errors.NotFound):
        service.find_memory(store, "/down.md")
    assert service.check().problems == []
    service.close()


def test_postgres_restart_under_a_server(pg_server: PgServer, tmp_path: Path) -> None:
    """PostgreSQL restarted under ``mnemofs serve``: a sandbox's save made meanwhile waits
    for it (the server answers the mount's change "ask again" while it cannot read the
    caller) and is made once it is back; the mount answers the rest meanwhile."""
    service = MemoryService(make_engine(pg_server.url), actor="api")
    store = service.create_store("Served").id
    session = service.create_session([{"memory_store_id": store}])
    token = service.create_session_token(session.id).token
    service.close()
    root = tmp_path / "mnt"
    server = start_server(pg_server.url, tmp_path / "server.log")
    try:
        with remote_mount(server.url, token, root):
            folder = root / "served"
            assert save(folder / "log.md", "one\n") == 0
            pg_server.stop()
            got: list[int] = []
            saving = threading.Thread(target=lambda: got.append(save(folder / "log.md", "two\n")))
            saving.start()
            time.sleep(0.5)
            assert os.listdir(folder) == ["log.md"]
            assert saving.is_alive()  # still waiting for the database, through the server
            pg_server.start()
            saving.join(timeout=30)
            assert got == [0]
    finally:
        server.stop()
    service = MemoryService(make_engine(pg_server.url), actor="api")
    assert service.find_memory(store, "/log.md").content == "two\n"
    service.close()
