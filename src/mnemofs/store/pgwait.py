"""Waiting for PostgreSQL's replies without falling asleep first.

psycopg drives every query as a generator that yields what it waits for (the socket readable,
writable, or both) and blocks in ``poll`` until then. A mount's change is two round trips, each
a few hundred µs of the server's work, and a thread that went to sleep for that long wakes on a
cold CPU: on this machine's VM the wake-up and the slower Python after it cost more than the
wait itself (measured over interleaved runs: a PostgreSQL mount's write phases 5-25% faster
with this spin, creates unchanged). So a
connection marked ``spin_s`` asks the socket with a zero-timeout ``poll`` for up to that long
before it lets psycopg's own wait block, the way ``fs/loop.py`` waits for the next FUSE request.

Only waits to read spin: writes and pipeline flushes never wait on this machine's sockets. The
generator psycopg hands over is wrapped, not replaced, so its own wait (timeouts, interrupts,
cancelling a query on Ctrl-C) still runs whenever the spin gives up. A connection without
``spin_s`` (every one but a mount's request thread) waits exactly as psycopg's does.
"""

from __future__ import annotations

import functools
import select
import time
from collections.abc import Generator
from typing import Any

# How long one wait spins before it sleeps: a round trip of a save's transaction on a server
# at hand, not one of a slow query (docs/decisions.md, "PostgreSQL writes").
SPIN_S = 500e-6


@functools.cache
def connection_class() -> Any:
    """psycopg's ``Connection`` with an optional spin (psycopg is imported only when used)."""
    import psycopg
    from psycopg.waiting import READY_R, WAIT_R

    def spun(gen: Generator[Any, Any, Any], fd: int, spin_s: float) -> Generator[Any, Any, Any]:
        """``gen``, with each wait to read first tried by spinning on ``fd``."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        clock = time.perf_counter
        try:
            wanted = next(gen)
            while True:
                ready = None
                if wanted == WAIT_R:
                    end = clock() + spin_s
                    while clock() < end:
                        if poller.poll(0):
                            ready = READY_R
                            break
                if ready is None:
                    ready = yield wanted
                wanted = gen.send(ready)
        except StopIteration as done:
            return done.value

    class Connection(psycopg.Connection):
        spin_s = 0.0

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            if self.spin_s:
                gen = spun(gen, self.pgconn.socket, self.spin_s)
            return super().wait(gen, *args, **kwargs)

    return Connection
