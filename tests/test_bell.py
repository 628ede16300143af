"""The bell that wakes the long polls' look (http/bell.py), on a real database: a commit rings
it (SQLite through inotify, from any connection; PostgreSQL through NOTIFY, the server's own
commits included), and nothing else does. Its safety-net look is put a minute away here, so
that only the bell can answer in time."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mnemofs.http import bell as bell_module
from mnemofs.http.bell import Bell
from mnemofs.store import Engine, MemoryService


@pytest.fixture(autouse=True)
def _no_safety_net(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bell_module, "QUIET_LOOK_S", 60.0)


@pytest.mark.parametrize("whose", ["the server's own", "another's"])
def test_a_commit_rings_the_bell(engine: Engine, whose: str) -> None:
    """The server's own commit (one service both commits and listens, as in ``serve``), and
    another connection's (on SQLite, another process's is the same write to the same file)."""
    setup = MemoryService(engine, actor="setup")
    store = setup.create_store("Notes").id
    setup.close()  # its notice told (PostgreSQL), before anyone listens
    service = MemoryService(engine, actor="server")
    writer = service if whose == "the server's own" else MemoryService(engine, actor="another")
    bell = Bell(service)

    async def main() -> None:
        await bell.listen()
        with anyio.move_on_after(0.5) as quiet:
            await bell.rung(-math.inf)
        assert quiet.cancelled_caught  # nothing committed: it waits
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(anyio.to_thread.run_sync, writer.create_memory, store, "/a", "a")
                await bell.rung(-math.inf)

    try:
        anyio.run(main)
    finally:
        bell.close()
        writer.close()
        service.close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_other_files_beside_the_database_do_not_ring_it(engine: Engine, tmp_path: Path) -> None:
    """A log written beside the database (``serve 2> server.log`` in its directory) woke the
    look at every line, and so at every request."""
    service = MemoryService(engine, actor="server")
    bell = Bell(service)
    log = tmp_path / "server.log"

    async def main() -> None:
        await bell.listen()
        with anyio.move_on_after(0.5) as quiet:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(anyio.to_thread.run_sync, log.write_text, "a line\n")
                await bell.rung(-math.inf)
        assert quiet.cancelled_caught  # still waiting

    try:
        anyio.run(main)
    finally:
        bell.close()
        service.close()
