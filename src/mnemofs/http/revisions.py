"""What the long polls (``GET /mnemofs/v1/changes/wait``) wait on: one look at the revisions
of every store any of them waits for, each time a commit is heard while any waits (bell.py).

Each poll used to look at its own stores every 50 ms, so the server's work grew with the
sandboxes that merely sat waiting: 50 idle remote mounts on PostgreSQL kept the server at 36%
of a core (and its database at 1,000 queries a second) with nothing changing. Now a poll looks
once when it arrives (a store that moved before it came is answered at once, as before), then
joins the others; a task of the server's looks for all of them at once and answers each poll
whose stores moved, each time its bell rings (bell.py: a commit heard). A look that fails (the
database is down) fails every poll waiting on it, as each poll's own look did.

A graceful stop (SIGTERM) answers every poll at once, nothing moved (``release_all``, called
by ``protocol.BoundedProtocol.shutdown``), and those that come after it as soon as they have
looked: uvicorn waits for the requests in flight, and every remote mount keeps one poll in
flight, so each stop took the rest of a poll's wait (up to 20 s, the server unreachable) where
it takes a fraction of a second now. The client polls again, of this server once it is back.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping

import anyio
from anyio.abc import TaskGroup

from mnemofs.http.bell import LOOK_S, QUIET_LOOK_S, Bell
from mnemofs.models import StoreId, StoreState

log = logging.getLogger("mnemofs.http")

Look = Callable[[list[str]], Awaitable[dict[StoreId, StoreState]]]


class _Poll:
    __slots__ = ("answered", "error", "known", "released", "states")

    def __init__(self, known: Mapping[str, int]) -> None:
        self.known = known
        self.answered = anyio.Event()
        self.states: dict[StoreId, StoreState] = {}
        self.error: Exception | None = None
        self.released = False  # answered by a graceful stop: nothing moved

    def moved(self, states: Mapping[StoreId, StoreState]) -> list[str]:
        return sorted(
            sid
            for sid, revision in self.known.items()
            if (state := states.get(StoreId(sid))) is None or state.revision != revision
        )

    def answer(self, states: Mapping[StoreId, StoreState]) -> None:
        self.states = {StoreId(sid): states[StoreId(sid)] for sid in self.known if sid in states}
        self.answered.set()


class Revisions:
    """The long polls' one look (see the module docstring). ``look`` reads the revisions of
    the stores named; the looking task runs in ``tasks`` from the first poll on, woken by
    ``bell`` (without one, a look every ``bell.LOOK_S`` while any poll waits)."""

    def __init__(self, look: Look, tasks: TaskGroup, bell: Bell | None = None) -> None:
        self._look = look
        self._tasks = tasks
        self._bell = Bell() if bell is None else bell
        self._polls: set[_Poll] = set()
        self._arrived = anyio.Event()
        self._looking = False  # the looking task was started (it then runs for good)
        self._released = False
        _RUNNING.add(self)

    async def wait(
        self, known: Mapping[str, int], wait_s: float
    ) -> tuple[list[str], dict[StoreId, StoreState]]:
        """The stores of ``known`` (id -> revision) whose revision moved, and their states,
        once one moved or after ``wait_s`` seconds."""
        states = await self._look(list(known))
        poll = _Poll(known)
        if moved := poll.moved(states):
            return moved, states
        if self._released:
            return [], states
        self._polls.add(poll)
        self._arrived.set()
        try:
            if not self._looking:
                self._looking = True
                self._tasks.start_soon(self._keep_looking)
            with anyio.move_on_after(wait_s):
                await poll.answered.wait()
        finally:
            self._polls.discard(poll)
        if poll.error is not None:
            raise poll.error
        if poll.released or not poll.answered.is_set():  # revisions as the poll came
            return [], states
        return poll.moved(poll.states), poll.states

    def release(self) -> None:
        """Answer every poll now, nothing moved, and those that come later at once (see the
        module docstring)."""
        self._released = True
        for poll in list(self._polls):
            if not poll.answered.is_set():
                poll.released = True
                poll.answered.set()

    async def _keep_looking(self) -> None:
        """Look whenever the bell rings while polls wait; with none waiting, rest until one
        comes (``Bell.rest`` once a second meanwhile: PostgreSQL's notices are read)."""
        looked = -math.inf
        while True:
            try:
                looked = await self._step(looked)
            except Exception:  # never seen: the polls must not go unanswered for it
                log.exception("the polls' bell failed; looking every %.2f s", LOOK_S)
                self._bell.close()
                self._bell = Bell()

    async def _step(self, looked: float) -> float:
        """One look and the wait for the bell after it (or a rest); when it last looked."""
        bell = self._bell
        if not self._polls:
            bell.rest()
            self._arrived = anyio.Event()
            with anyio.move_on_after(QUIET_LOOK_S):
                await self._arrived.wait()
            return looked
        await bell.listen()  # before the look: a commit after it is heard
        waiting = list(self._polls)
        ids = sorted({sid for poll in waiting for sid in poll.known})
        looked = anyio.current_time()
        try:
            states = await self._look(ids)
        except Exception as exc:  # every poll waiting on this look fails with it
            for poll in waiting:
                poll.error = exc
                poll.answered.set()
        else:
            for poll in waiting:
                if poll.moved(states):
                    poll.answer(states)
        await bell.rung(looked)
        return looked


_RUNNING: weakref.WeakSet[Revisions] = weakref.WeakSet()  # this process's (one per app)


def release_all() -> None:
    """A graceful stop has begun: release every ``Revisions`` of this process."""
    for revisions in list(_RUNNING):
        revisions.release()
