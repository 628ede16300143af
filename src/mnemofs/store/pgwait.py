"""Waiting for PostgreSQL's replies without falling asleep first, once saves come in a stream.

psycopg drives every query as a generator that yields what it waits for (the socket readable,
writable, or both) and blocks in ``poll`` until then. A mount's change is one or two round
trips, each a few hundred µs of the server's work, and a thread that went to sleep for that long
wakes on a cold CPU: on this machine's VM the wake-up and the slower Python after it cost more
than the wait itself (measured over interleaved runs: a PostgreSQL mount's write phases 5-25%
faster with this spin, creates unchanged). So a connection given a ``Spin`` asks the socket
with a zero-timeout ``poll`` for up to ``SPIN_S`` before it lets psycopg's own wait block, the
way ``fs/loop.py`` waits for the next FUSE request.

Only within a stream of waits, though: one that has gone on for ``STREAM_S`` with no gap over
``STREAM_GAP_S`` between a reply and the next wait (a program writing thousands of files). A
short burst after a pause (an agent saving a few files) sleeps instead. A spinning thread keeps
its vCPU busy, so the server process its query wakes is placed on the other vCPU, which on this
VM has halted and takes its time to wake (`perf sched`: the backend waited 67-75 µs a wake-up to
run, against 9 µs when the client slept and the backend ran on its vCPU); under a sustained
stream both vCPUs stay awake and the spin pays. Measured through two mounts alternated, the
spin only in streams against always: batches of 100 after 0.3 s pauses 1.06-1.50x, the four
creates after a create that follows a 0.3-2 s pause 1.22-1.29x (1,270-1,467 against 1,637-1,883
µs); the benchmark's sustained phases 0.72-1.13x, the saves' median ~0.92, inside its noise
(docs/decisions.md).

Only waits to read spin: writes and pipeline flushes never wait on this machine's sockets. The
generator psycopg hands over is wrapped, not replaced, so its own wait (timeouts, interrupts,
cancelling a query on Ctrl-C) still runs whenever the spin gives up. A connection without a
``Spin`` (every one but a mount's request thread) waits exactly as psycopg's does.
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
STREAM_GAP_S = 2e-3  # a wait that begins longer than this after the last reply starts a stream
STREAM_S = 0.1  # waits spin once their stream has gone on this long


class Spin:
    """Whether a connection's next wait for a reply spins, and for how long: the stream of
    its waits so far (see the module docstring). One per connection, used by one thread."""

    __slots__ = ("began", "ended")

    def __init__(self) -> None:
        self.began = self.ended = float("-inf")

    def until(self, now: float) -> float:
        """The time up to which a wait that begins ``now`` spins (``now``: not at all)."""
        if now - self.ended > STREAM_GAP_S:
            self.began = now
        return now + SPIN_S if now - self.began >= STREAM_S else now

    def answered(self, now: float) -> None:
        """The reply a wait was for came ``now``."""
        self.ended = now


@functools.cache
def connection_class() -> Any:
    """psycopg's ``Connection`` with an optional spin (psycopg is imported only when used)."""
    import psycopg
    from psycopg.waiting import READY_R, WAIT_R

    def spun(gen: Generator[Any, Any, Any], fd: int, spin: Spin) -> Generator[Any, Any, Any]:
        """``gen``, with each wait to read first tried by spinning on ``fd`` as ``spin`` says."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        clock = time.perf_counter
        try:
            wanted = next(gen)
            while True:
                ready = None
                if wanted == WAIT_R:
                    end = spin.until(clock())
                    while clock() < end:
                        if poller.poll(0):
                            ready = READY_R
                            break
                if ready is None:
                    ready = yield wanted
                if wanted == WAIT_R:
                    spin.answered(clock())
                wanted = gen.send(ready)
        except StopIteration as done:
            return done.value

    class Connection(psycopg.Connection):
        spin: Spin | None = None

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            if self.spin is not None:
                gen = spun(gen, self.pgconn.socket, self.spin)
            return super().wait(gen, *args, **kwargs)

    return Connection
