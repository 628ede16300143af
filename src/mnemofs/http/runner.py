"""How the HTTP face calls the store (``store_runner``).

On SQLite, inline on the event loop, as the mount daemon commits on its trio thread
(PERF-NOTES: a hop to a worker thread costs 150-200 µs, more than the commit; measured here,
two hops per request made an update 0.2x of in-process); SQLite takes one writer at a time
anyway, and ``--workers`` adds processes. But a write that has to wait for SQLite's lock
(another process's write: a mount's, another worker's, a CLI's import of a whole store; another
thread's of this one: an import through the API, the upkeep below) would wait on the loop, up
to 30 s, and every request of every client with it, reads and health checks included. So an
inline call's first write does not wait (``MemoryService.write_at_once``): if the lock is
taken it raises ``WriteWouldWait`` having done nothing, and the call is made again after a
pause on the loop (``errors.Patience``: 1 ms doubling, as SQLite's own busy handler sleeps),
while everyone else is served; after 30 s it is refused ``Unavailable`` (503, retried by
clients), which is what the busy timeout came to. A remote mount pauses and asks again
itself (it has its own requests to serve meanwhile): its change's request says so
(``errors.WRITE_AT_ONCE_HEADER``), and the call is made once (``once``). (A thread of its own for
such calls made a convoy: under eight clients every write after the first that waited went
there too, each with a thread's hop, while the loop sat idle.)

Nor does a commit on the loop copy the WAL back into the database: like a mount, the server
defers its checkpoints (``MemoryService.defer_checkpoints``), and its upkeep (``Inline.keep``)
makes them on a thread of its own, with the search index's catch-up and the reads noted:
a look every ``CHECKPOINT_LOOK_S`` while requests come, none while the server is idle. An
erasure, which empties the WAL once made and waits for its readers to let it, is made on that
thread too (``erasing``). A search runs on a thread of its own (``searching``): on a store of
10,000 memories one took 27-42 ms on the loop, and a client searching back to back made every
other request wait (a health check's median 1.5 -> 68 ms); SQLite runs the query without
Python's lock, so the loop serves the others meanwhile.

On PostgreSQL, each call runs on a worker thread (every thread its own connection),
``mnemofs serve --connections`` at a time, so a network round trip never stalls the loop; a
write that would wait for a store's row gives its thread back and is made again after a pause,
as on SQLite (a row lock taken is a wait of more than ``AT_ONCE_LOCK_WAIT_MS``, 50 ms).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio

from mnemofs import limits
from mnemofs.errors import FIRST_TRY, LAST_TRY, Patience, WriteWouldWait
from mnemofs.store import MemoryService

log = logging.getLogger("mnemofs.http")


# A save writes ~15 pages to the WAL: at 1,500 saves a second ~90 MB/s, so the upkeep looks this
# often while requests come (the WAL's bound is 64 MiB), as a mount's does.
CHECKPOINT_LOOK_S = 0.1


class Inline:
    """SQLite's runner (see the module docstring); ``close`` once no call is made any more."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service
        self._upkeep = ThreadPoolExecutor(1, thread_name_prefix="mnemofs-upkeep")
        self._search = ThreadPoolExecutor(1, thread_name_prefix="mnemofs-search")
        self._called: anyio.Event | None = None  # set by a call while the upkeep rests

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        patience: Patience | None = None
        try:
            while True:
                _at_once(self._service, Patience.attempt(patience))
                try:
                    return fn(*args, **kwargs)
                except WriteWouldWait:
                    patience = patience or Patience()
                    pause = patience.pause()
                finally:
                    self._service.write_at_once(False)  # a call that wrote nothing
                await anyio.sleep(pause)  # the others are served meanwhile
        finally:
            if self._called is not None:
                self._called.set()

    async def once(self, attempt: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` made once, its first write at once (``attempt``: which try, as
        ``Patience.attempt`` says): a remote mount's change (``errors.WRITE_AT_ONCE_HEADER``),
        which pauses and asks again itself while its own thread serves its other requests.
        ``WriteWouldWait`` goes back to it."""
        _at_once(self._service, attempt)
        try:
            return fn(*args, **kwargs)
        finally:
            self._service.write_at_once(False)
            if self._called is not None:
                self._called.set()

    async def erasing(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn``, an erasure (a redaction, a store's deletion), on the upkeep's thread: once
        made it empties the WAL, waiting up to ``ERASE_WAIT_S`` (10 s) for readers to leave it
        (an export, a backup, another process's long read), which on the loop held up every
        request. Its write waits for the lock there too, as patiently as a mount's would."""
        return await self._on(self._upkeep, functools.partial(fn, *args, **kwargs))

    async def searching(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn``, a search, on the search thread (module docstring): its catch-up of the
        index, if any, waits for the lock there as patiently as the upkeep's."""
        return await self._on(self._search, functools.partial(fn, *args, **kwargs))

    async def _on(self, thread: ThreadPoolExecutor, call: Callable[[], Any]) -> Any:
        try:
            return await asyncio.wrap_future(thread.submit(call))
        finally:
            if self._called is not None:
                self._called.set()

    async def keep(self) -> None:
        """The upkeep (module docstring), from the event loop until cancelled."""
        service = self._service
        service.defer_checkpoints()  # this thread's commits no longer checkpoint
        while True:
            await anyio.sleep(CHECKPOINT_LOOK_S)
            try:
                wait = service.upkeep_in()  # clocks and a stat
                if wait is not None and wait <= 0:
                    await asyncio.wrap_future(self._upkeep.submit(service.checkpoint))
                    continue
                # Until the work is due, or a call may have made some.
                self._called = called = anyio.Event()
                with anyio.move_on_after(math.inf if wait is None else wait):
                    await called.wait()
                self._called = None
            except Exception as exc:
                log.warning("the upkeep failed (%s); retrying", exc)

    def close(self) -> None:
        self._search.shutdown(wait=True)
        self._upkeep.shutdown(wait=True)


class Threaded:
    """PostgreSQL's runner: on ``connections`` threads of its own, each with its connection.
    The framework's own thread pool runs 40 at a time, and each thread keeps a connection: a
    burst of requests left a process holding 41, and a few processes or hosts then used up
    the server's ``max_connections`` (100 by default). That pool behind a limiter of
    ``connections`` was not enough: a call that came as another ended sometimes found no
    thread idle yet and got a new one, with a new connection (7 held for 4, once in three CI
    runs)."""

    def __init__(self, service: MemoryService, connections: int) -> None:
        self._service = service
        self._pool = ThreadPoolExecutor(connections, thread_name_prefix="mnemofs-db")

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """As ``Inline``'s: a call whose first write finds its store's row locked by another
        transaction (a restore, a prune) gives its thread back and is made again after a
        pause. Waiting on their threads, as many such writes as threads held up every other
        request of the server, for any store."""
        patience: Patience | None = None
        while True:
            try:
                return await self.once(Patience.attempt(patience), fn, *args, **kwargs)
            except WriteWouldWait:
                patience = patience or Patience()
            await anyio.sleep(patience.pause())

    async def once(self, attempt: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` made once, its first write at once (see ``Inline.once``), on a thread."""
        service = self._service

        def made() -> Any:
            _at_once(service, attempt)
            try:
                return fn(*args, **kwargs)
            finally:
                service.write_at_once(False)

        return await asyncio.wrap_future(self._pool.submit(made))

    async def erasing(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """As any call: PostgreSQL keeps no WAL of rows for an erasure to empty."""
        return await self(fn, *args, **kwargs)

    async def searching(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """As any call: every call is on a thread already."""
        return await self(fn, *args, **kwargs)

    async def keep(self) -> None:
        """Only the secrets screen, loaded now (``warm_up``); the service's own thread catches
        the search index up."""
        self._service.warm_up()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _at_once(service: MemoryService, attempt: str) -> None:
    """``service.write_at_once`` for a call's ``attempt`` (``Patience.attempt``)."""
    service.write_at_once(again=attempt != FIRST_TRY, last=attempt == LAST_TRY)


def store_runner(
    service: MemoryService, connections: int = limits.SERVE_CONNECTIONS
) -> Inline | Threaded:
    """Inline for SQLite, on worker threads for PostgreSQL, ``connections`` at a time (see the
    module docstring)."""
    if service.engine.dialect == "sqlite":
        return Inline(service)
    return Threaded(service, connections)
