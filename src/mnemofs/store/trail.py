"""The search index trails saves (SQLite: migration 0009, PostgreSQL: 0013).

A save notes what changed for the index instead of indexing it; a catch-up takes the notes in,
in batches. Every search (and ``db check``, and every erasing change) catches up first, so no
reader ever sees a stale index: when the background catches up is a matter of cost only. It does
once this process's writes pause, not during a burst of them: FTS5 takes 40-140 µs a change, and
that work competed with the burst's saves for the CPU and the write lock (renames through a
mount 19% slower, measured). Who runs it: a mount's upkeep thread, asking ``due_in``; any other
process a thread of its own, started by its first write.
"""

from __future__ import annotations

import logging
import threading
import time

from mnemofs.store.rows import (
    SEARCH_BATCH,
    SEARCH_BATCH_PG,
    SEARCH_QUIET_S,
    SEARCH_TRAIL_MAX_S,
    SEARCH_TRAIL_S,
)
from mnemofs.store.sql import Database
from mnemofs.store.texts import _catch_up_search, _search_pending

log = logging.getLogger("mnemofs.store")


class SearchTrail:
    """When a service's noted changes go into the search index, and the thread that takes them
    in where no mount's upkeep does."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.caught_up = time.monotonic()  # when the last catch-up began
        self.wrote_at = 0.0  # when this service last wrote
        self.heard_at = self.caught_up  # when a commit of another connection was last heard
        self._version: int | None = None  # the data_version heard then
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()

    def catch_up(self, *, upkeep: bool = False) -> None:
        """Take every change noted for the search index into it, ``SEARCH_BATCH`` at a time,
        each batch its own short transaction; a writer waiting behind a batch goes before the
        next one. ``upkeep`` (a mount's worker thread): the SQLite WAL is checkpointed between
        batches when due, so a long catch-up does not let it grow meanwhile."""
        self.caught_up = time.monotonic()
        if not self.db.run(_search_pending, write=False):
            return
        # A batch that is not full took every note there was: done, even if saves have noted
        # more since (the next catch-up takes them). Chasing those, a batch of one for every
        # save let in between, kept each save waiting for a transaction of the catch-up's for
        # as long as saves came (measured: 120 saves/s in a store of 10,000 memories).
        batch = SEARCH_BATCH if self.db.dialect == "sqlite" else SEARCH_BATCH_PG
        while self.db.run(lambda tx: _catch_up_search(tx, batch), write=True) >= batch:
            self.db.step_aside()
            if upkeep:
                self.db.checkpoint()

    def wait(self) -> float:
        """Seconds until the background should catch up (0 or less: now). After writes of this
        service's own: once they pause for ``SEARCH_QUIET_S``, or ``SEARCH_TRAIL_MAX_S`` after
        the last catch-up while they go on (that bounds what a search may find to take in
        first). With none since: ``SEARCH_TRAIL_S`` after the last, for what other processes
        left behind."""
        now = time.monotonic()
        if self.wrote_at >= self.caught_up:
            quiet = self.wrote_at + SEARCH_QUIET_S
            return min(quiet, self.caught_up + SEARCH_TRAIL_MAX_S) - now
        return self.caught_up + SEARCH_TRAIL_S - now

    def due_in(self) -> float | None:
        """For a mount's upkeep (a deferring process; None elsewhere): ``wait``, or None while
        nothing can be waiting for the index (no write of this service and no commit heard
        since the last catch-up began), so an idle mount looks for nothing."""
        if not self.db.deferred:
            return None
        if self.wrote_at < self.caught_up and self.heard_at < self.caught_up:
            return None
        return self.wait()

    def heard(self, version: int | None) -> None:
        """What a mount's watcher read of ``data_version``: changed, another connection
        committed, and it may have left changes for the index (a CLI that saved and exited
        before its own thread caught up)."""
        if version != self._version:
            self._version = version
            self.heard_at = time.monotonic()

    def wrote(self) -> None:
        """After a write: the thread catches up once writes pause (unless a mount's upkeep
        does)."""
        self.wrote_at = time.monotonic()
        if self.db.deferred:
            return
        if self._thread is None:
            with self._starting:  # the HTTP server writes from several threads
                if self._thread is None:
                    thread = threading.Thread(
                        target=self._trail, name="mnemofs-search-index", daemon=True
                    )
                    thread.start()
                    self._thread = thread
        if not self._wake.is_set():  # set() takes a lock: once is enough
            self._wake.set()

    def stop(self) -> None:
        """End the thread (the service closes)."""
        self._stopping.set()
        if self._thread is not None:
            self._wake.set()
            self._thread.join(timeout=10)

    def _trail(self) -> None:
        while True:
            self._wake.wait()
            if self._stopping.is_set():  # the service's close() catches up itself
                return
            while (wait := self.wait()) > 0:
                if self._stopping.wait(wait):
                    return
            self._wake.clear()
            try:
                self.catch_up()
            except Exception as exc:
                log.warning("the search index could not catch up (%s); retrying", exc)
                self._wake.set()  # again SEARCH_TRAIL_S after this try (see ``wait``)
            if self.db.deferred:  # a mount now: its upkeep thread catches up from here on
                return
