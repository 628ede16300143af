"""How the HTTP face calls the store (``store_runner``).

On SQLite, inline on the event loop, as the mount daemon commits on its trio thread
(PERF-NOTES: a hop to a worker thread costs 150-200 µs, more than the commit; measured here,
two hops per request made an update 0.2x of in-process); SQLite takes one writer at a time
anyway, and ``--workers`` adds processes. But a write that has to wait for SQLite's lock
(another process's write: a mount's, a CLI's import of a whole store; another thread's of this
one) would wait on the loop, up to 30 s, and every request of every client with it, reads and
health checks included. So an inline call's first write does not wait
(``MemoryService.write_at_once``): if the lock is taken it raises ``WriteWouldWait`` having done
nothing, and the call is made again on a thread of its own, where it waits as before while
the loop serves everyone else.

On PostgreSQL, each call runs on a worker thread (every thread its own connection),
``mnemofs serve --connections`` at a time, so a network round trip never stalls the loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio

from mnemofs import limits
from mnemofs.store import MemoryService, WriteWouldWait


class Inline:
    """SQLite's runner (see the module docstring); ``close`` once no call is made any more."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service
        # One thread for the calls that wait, one connection for it: they wait for the same
        # lock, one after the other, whichever thread they are on.
        self._waiting = ThreadPoolExecutor(1, thread_name_prefix="mnemofs-waiting-write")

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._service.write_at_once()
        try:
            return fn(*args, **kwargs)
        except WriteWouldWait:
            call = functools.partial(fn, *args, **kwargs)
            return await asyncio.wrap_future(self._waiting.submit(call))

    def close(self) -> None:
        self._waiting.shutdown(wait=True)


class Threaded:
    """PostgreSQL's runner: on worker threads, ``connections`` at a time. The framework's own
    thread pool runs 40 at a time, and each thread keeps a connection: a burst of requests
    left a process holding 41, and a few processes or hosts then used up the server's
    ``max_connections`` (100 by default)."""

    def __init__(self, connections: int) -> None:
        self._connections = connections
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._limiter is None:  # made in the event loop that uses it
            self._limiter = anyio.CapacityLimiter(self._connections)
        call = functools.partial(fn, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    def close(self) -> None: ...


def store_runner(
    service: MemoryService, connections: int = limits.SERVE_CONNECTIONS
) -> Inline | Threaded:
    """Inline for SQLite, on worker threads for PostgreSQL, ``connections`` at a time (see the
    module docstring)."""
    if service.engine.dialect == "sqlite":
        return Inline(service)
    return Threaded(connections)
