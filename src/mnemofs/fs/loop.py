"""A leaner wait for the next FUSE request than pyfuse3's own.

Before every request pyfuse3's session loop awaits its ``_wait_fuse_readable()``: a trio lock
(shared by its worker tasks) and ``trio.lowlevel.wait_readable`` on the ``/dev/fuse`` fd, that
is, two passes through trio's scheduler (each an ``epoll_wait`` and the scheduler's own Python)
per request, even when the next request is already waiting. A mount runs one worker task (see
``mount._serve``), so the lock guards nothing; this wait asks the fd first with a zero-timeout
``poll`` and, when a request is there, lets the loop read it at once. At most ``YIELD_EVERY``
requests in a row go that way before a real wait lets the mount's other tasks (the change
watcher, the upkeep thread's results) run: they wait a millisecond or two at most, and the
real wait's pass through the scheduler (~20 µs) costs a request well under one. Measured on
this machine: ``stat`` 12,000 -> 40,000 per second, a read 255 -> 180 µs (docs/decisions.md,
"The FUSE request loop").

Within a burst (the last request came within ``SPIN_S`` of the wait before it), the wait also
spins on that zero-timeout ``poll`` for up to ``SPIN_S`` before it sleeps: a program working
through files sends its next request a few tens of µs after our reply, and a thread that went to
sleep in between wakes up on a cold CPU (on this machine's VM a wake-up costs more than a whole
``stat``, and the request after it runs up to twice as slow). Outside a burst (an agent's
occasional ``cat``) nothing spins, so an idle or lightly used mount burns no CPU.

A mount runs one worker task, and its handlers never wait, with two exceptions: a change whose
write finds a lock taken by another process (SQLite's, held by a CLI's import of a whole
store; on PostgreSQL a store's row, held by its restore) or its database or server away for a
moment (a restart) pauses and tries again (``adapter.Adapter._change``), and so does an open
whose read found it away (``Adapter._waiting_out``), rather than block the thread and, with
it, every request of the mount. Before each pause it calls ``aside``: another task reads
and serves the requests meanwhile, a parked one or a new one (``pyfuse3._session_loop`` in the
mount's nursery, at most ``MAX_SPARES`` in all). Only one task at a time waits for the fd
(``_Turns.reader``): the others park until a pause wants one of them, or the session ends.

pyfuse3 looks the function up in its module's globals for every request, so replacing that
global is enough. ``install`` does so only where it finds what it expects (the function, one
``/dev/fuse`` fd, its session loop) and otherwise leaves pyfuse3 as it is.
"""

from __future__ import annotations

import logging
import os
import select
import time
from collections.abc import Awaitable, Callable

import pyfuse3
import trio

log = logging.getLogger("mnemofs.fs")

YIELD_EVERY = 64  # 16 made stats after a write ~5% slower (docs/decisions.md)
# How long a wait within a burst spins before it sleeps (see the module docstring).
SPIN_S = 200e-6
# Tasks started to serve requests while changes pause (see the module docstring): one for
# each change pausing at once (a program saving each), cheap (a coroutine, parked when not
# needed), as many as pyfuse3's own default for its worker tasks, less one. With four, five
# programs saving during an import held up every other request of the mount again.
MAX_SPARES = 98


class _Turns:
    """Which task waits for the next request, and the others (see the module docstring)."""

    def __init__(self, session_loop: Callable[..., Awaitable[None]]) -> None:
        self.session_loop = session_loop  # pyfuse3's, for spares
        self.reader: trio.lowlevel.Task | None = None  # the one waiting for the fd, if any
        self.parked = trio.lowlevel.ParkingLot()
        self.nursery: trio.Nursery | None = None  # where spares start (``serve_spares``)
        self.spares = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.reader = None
        self.parked.unpark_all()


_turns: _Turns | None = None


def serve_spares(nursery: trio.Nursery) -> None:
    """Let ``aside`` start spare tasks in ``nursery`` (the mount's, cancelled at unmount)."""
    if _turns is not None:
        _turns.nursery = nursery


def aside() -> None:
    """Before a handler pauses (``adapter.Adapter._change``): unless a task already waits for
    the next request, wake a parked one, or start one, to serve the mount meanwhile."""
    turns = _turns
    if turns is None or turns.reader is not None or turns.closed:
        return
    if turns.parked.statistics().tasks_waiting:
        turns.parked.unpark()
    elif turns.nursery is not None and turns.spares < MAX_SPARES:
        turns.spares += 1
        turns.nursery.start_soon(_spare, turns, name=f"mnemofs-spare-{turns.spares}")


async def _spare(turns: _Turns) -> None:
    try:
        # min_tasks=max_tasks=1: it starts no task itself (it counts the main one).
        await turns.session_loop(turns.nursery, 1, 1)
    finally:
        turns.close()  # its loop ended: the session is over, every other one's too


def _fuse_fd() -> int | None:
    """The process's one ``/dev/fuse`` descriptor (pyfuse3 keeps it to itself)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "/dev/fuse":
                found.append(int(name))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    return found[0] if len(found) == 1 else None


def install(woken: Callable[[], None] | None = None) -> bool:
    """Replace pyfuse3's wait (call after ``pyfuse3.init``); False if it was left alone.
    ``woken`` is called whenever a request ends a wait that slept (not within a burst): the
    mount's upkeep rests until then."""
    global _turns
    fd = _fuse_fd()
    session_loop = getattr(pyfuse3, "_session_loop", None)
    if fd is None or session_loop is None or not hasattr(pyfuse3, "_wait_fuse_readable"):
        log.debug("keeping pyfuse3's own request loop")
        return False
    _turns = turns = _Turns(session_loop)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    clock = time.perf_counter
    in_a_row = 0
    burst = False

    async def wait_fuse_readable() -> bool:
        nonlocal in_a_row, burst
        while turns.reader is not None:  # another task waits for it: this one has no turn
            await turns.parked.park()
        if turns.closed:
            return False
        if in_a_row < YIELD_EVERY and poller.poll(0):
            in_a_row += 1
            return True
        began = clock()
        if burst and in_a_row < YIELD_EVERY:
            while clock() - began < SPIN_S:
                if poller.poll(0):
                    in_a_row += 1
                    return True
        in_a_row = 0
        turns.reader = trio.lowlevel.current_task()
        try:
            await trio.lowlevel.wait_readable(fd)
        except trio.ClosedResourceError:  # pyfuse3.terminate(): the loop ends, every task's
            turns.close()
            return False
        finally:
            if turns.reader is trio.lowlevel.current_task():
                turns.reader = None
        burst = clock() - began < SPIN_S  # spun and slept: the requests have thinned out
        if woken is not None:
            woken()
        return True

    pyfuse3._wait_fuse_readable = wait_fuse_readable
    return True
