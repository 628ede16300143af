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

pyfuse3 looks the function up in its module's globals for every request, so replacing that
global is enough. ``install`` does so only where it finds what it expects (the function, one
``/dev/fuse`` fd) and otherwise leaves pyfuse3 as it is.
"""

from __future__ import annotations

import logging
import os
import select
import time
from collections.abc import Callable

import pyfuse3
import trio

log = logging.getLogger("mnemofs.fs")

YIELD_EVERY = 64  # 16 made stats after a write ~5% slower (docs/decisions.md)
# How long a wait within a burst spins before it sleeps (see the module docstring).
SPIN_S = 200e-6


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
    fd = _fuse_fd()
    if fd is None or not hasattr(pyfuse3, "_wait_fuse_readable"):
        log.debug("keeping pyfuse3's own request loop")
        return False
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    clock = time.perf_counter
    in_a_row = 0
    burst = False

    async def wait_fuse_readable() -> bool:
        nonlocal in_a_row, burst
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
        try:
            await trio.lowlevel.wait_readable(fd)
        except trio.ClosedResourceError:  # pyfuse3.terminate(): the loop ends
            return False
        burst = clock() - began < SPIN_S  # spun and slept: the requests have thinned out
        if woken is not None:
            woken()
        return True

    pyfuse3._wait_fuse_readable = wait_fuse_readable
    return True
