"""A PostgreSQL connection that listens for the changes other processes tell
(store/notices.py): what a mount and a server's bell wait on."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any


class Listener:
    """Notifications on one PostgreSQL connection: wait until ``fileno()`` is readable, then
    ``drain()``; the payloads of notifications sent together arrive once.

    Notifications sent by the owning Database's own connections are left out: a mount already
    shows what it saved itself, and refreshing after each of its own saves cost ~6 ms of every
    save (measured: 141 saves/s against 890/s). The notifications are sent after the commit
    (store/notices.py), also for a save whose connection broke while committing: other mounts
    hear it, and this one finds whatever it kept at its look every second. A server's bell
    (http/bell.py) wakes when the connection turns readable, whoever sent the notice.
    """

    # A notice lost with a process that ended between its commit and the send is found by
    # the look made after this long without one.
    quiet_look_s = 1.0

    def __init__(self, conn: Any, own_pids: Callable[[], set[int]]) -> None:
        self._conn = conn
        self._own_pids = own_pids

    def fileno(self) -> int:
        return int(self._conn.fileno())

    def drain(self) -> set[str]:
        """The payloads heard since the last drain, without waiting. Read from libpq itself
        (this connection only listens): psycopg's ``notifies(timeout=0)`` took ~95 µs a call
        on a mount's request thread, measured, for what is a read of the socket's buffer."""
        pg = self._conn.pgconn
        pg.consume_input()
        heard = []
        while (notify := pg.notifies()) is not None:
            heard.append(notify)
        if not heard:
            return set()
        own = self._own_pids()
        return {n.extra.decode() for n in heard if n.be_pid not in own}

    def heard_states(self) -> None:
        return None  # a notice names a store, not its state

    def close(self) -> None:
        with suppress(Exception):
            self._conn.close()
