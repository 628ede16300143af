"""PostgreSQL: telling listening mounts which stores changed, off the save path (issue 17).

A mount on PostgreSQL listens on ``CHANGES_CHANNEL`` and looks at a store again when it hears
the store's id. Every change used to send its ``NOTIFY`` inside its own transaction, and at
every such commit the server signals every listening backend of the database, each of which
wakes, reads the queue and writes to its mount. Through a mount, measured against the same
code sending none: creates, appends and deletes 6-9% slower with one mount listening (its
own), 23-24% with two.

So a change only notes its store on its transaction (``Tx.tell``); once the transaction has
committed, ``Notices`` sends the notes from a thread of its own, at once when it has sent none
for ``NOTICE_INTERVAL_S``, else that long after the last: a burst of saves is told about 20
times a second, an isolated change at once, and never before its commit. A listening mount
looks at most every 50 ms while busy anyway (``LOOK_INTERVAL_S`` in fs/mount.py), and after
a second without a notice (``Listener.quiet_look_s``), which is also what covers a notice lost
with a process that ended between its commit and the send. A server's long polls hear the
notices the same way (http/bell.py), its own included. The thread, and its connection, end once
it has had nothing to tell for ``NOTICE_IDLE_S``: an idle mount holds no more connections than
it did before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("mnemofs.store")

CHANGES_CHANNEL = "mnemofs_changes"  # PostgreSQL NOTIFY channel; the payload is a store id
NOTIFY = f"SELECT pg_notify('{CHANGES_CHANNEL}', :store)"
NOTICE_INTERVAL_S = 0.05  # a store's changes are told at most this often by one process
NOTICE_IDLE_S = 5.0  # the thread ends after this long with nothing to tell


class Notices:
    """The stores whose changes have committed and not been told yet, and the thread that
    tells them with ``send``: started by the first, ended by ``stop`` or after
    ``NOTICE_IDLE_S`` with nothing to tell, when it calls ``done`` (its connection closes)."""

    def __init__(
        self, send: Callable[[list[str]], None], done: Callable[[], None] = lambda: None
    ) -> None:
        self._send = send
        self._done = done
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._sent_at = float("-inf")

    def committed(self, stores: Iterable[str]) -> None:
        """After a commit that changed ``stores``: have them told (see the module docstring)."""
        with self._lock:
            self._pending.update(stores)
            if self._thread is None:
                self._stopping.clear()
                self._thread = threading.Thread(
                    target=self._tell, name="mnemofs-notices", daemon=True
                )
                self._thread.start()
        if not self._wake.is_set():  # set() takes a lock: once is enough
            self._wake.set()

    def stop(self) -> None:
        """Tell what is still untold, now, and end the thread (the database closes)."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake.set()
        thread.join(timeout=10)
        with self._lock:
            if self._thread is thread:
                self._thread = None

    def _tell(self) -> None:
        try:
            self._tell_until_idle()
        finally:
            self._done()

    def _tell_until_idle(self) -> None:
        while True:
            if not self._wake.wait(NOTICE_IDLE_S):
                with self._lock:  # committed() adds under it: it sees this thread gone
                    if not self._pending:
                        self._thread = None
                        return
                continue
            wait = self._sent_at + NOTICE_INTERVAL_S - time.monotonic()
            if wait > 0:
                self._stopping.wait(wait)  # cut short by stop(): tell the rest now
            with self._lock:
                self._wake.clear()
                stores, self._pending = self._pending, set()
            if stores:
                self._sent_at = time.monotonic()
                try:
                    self._send(sorted(stores))
                except Exception as exc:  # mounts look every quiet_look_s anyway
                    log.warning("could not tell listening mounts of a change (%s)", exc)
            if self._stopping.is_set():
                return
