"""The SQLite WAL of one process's ``Database``: checkpoints that keep it small, and the queue
for SQLite's one write lock.

A PASSIVE checkpoint copies committed pages back into the database but never rewinds the log.
SQLite starts the log over only when a writer begins right after a checkpoint that copied
everything and no reader holds a snapshot in it; under a steady stream of saves that moment
never comes (measured: every passive checkpoint of a soak complete, and the WAL growing 60 MB/s
to 22 GB beside a 318 MB database). So a checkpoint follows its passive pass with a RESTART or
TRUNCATE one, which waits at most ``WAL_RESTART_WAIT_MS`` for the writers and readers of the
moment (saves wait that long at worst) and makes the next writer start the log over. The lock
is not fair: a writer that commits back to back re-takes it before a waiting checkpoint wakes
(measured: 3,000 saves in a loop, the WAL at 223 MiB), so this process's own write
transactions step aside while that pass runs (``_restarting``); it waits for one under way
itself (``_writer``), so SQLite's busy handler never sleeps on it. What the saves committed
while the passive pass copied is copied by more passive passes first (up to
``WAL_CATCH_UP_PASSES``, until one finds fewer than ``WAL_LEFT_FRAMES`` new), while the saves
go on: the RESTART copied what one pass let in, and on ext4 the saves waited a median of 9 ms
for it every ~0.15 s under load; now 3 ms.

Rewound, not cut, while the writes keep coming: a checkpoint whose log has reached
``WAL_CHECKPOINT_BYTES`` RESTARTs, which leaves the file at the size it reached and has the
next writer overwrite it from its start. Cutting the file as well (TRUNCATE: an ftruncate of
10-25 MiB) made the pass 2-5 ms, and a mount's saves waited that long several times a second
under load; a RESTART pass took 0.03-1.4 ms (issue 17). A pass due by time (none for
``WAL_CHECKPOINT_INTERVAL_S``: the writes have let up) copies what is new, so the database file
holds every commit within about a second, and leaves the file as it is: the next writer starts
the log over and overwrites it. Cut, the file would grow again under the next burst of saves,
and a commit that grows it costs more than one that overwrites it (a commit of 12 pages: 69-93
against 48-61 µs on tmpfs, 97-116 against 69-73 on ext4; bursts of saves through a mount on
ext4 after a second's pause 5-10% slower). The file is cut (TRUNCATE) once it has not changed
for ``WAL_IDLE_CUT_S``, by a forced pass, and after an erasing change (``Database.clear_wal``).
A log that pass copied whole is also started over by the pass itself (``Wal._prime``): the
writer that starts a log over writes its header and syncs it (``synchronous=NORMAL``), and that
was the next save, after every pause. Once primed, the log is left alone while nobody writes
to it (its file unchanged since that pass), so an idle mount writes nothing. How
much of a rewound log is new cannot be told from the file's size, so a deferring process passes
whenever the file changed since its last pass (a stat: size and mtime); the passive pass copies
what is new and reports the log's length, which decides whether to RESTART. (Not by reading the
``-shm`` index header: opening and closing any descriptor of that file drops every POSIX lock
this process holds on it, SQLite's read locks included, and another process then overwrote a
log still being read: "database disk image is malformed" within seconds of two mounts and the
CLI sharing a store.)

A mount checkpoints from a worker thread (``Database.defer_checkpoints``); any other process's
commits do it themselves once the WAL passes ``WAL_AUTO_TRUNCATE_BYTES``.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from contextlib import suppress
from typing import Any

from mnemofs.store.engine import SQLITE_BUSY_TIMEOUT_MS

WAL_CHECKPOINT_BYTES = 8 * 1024 * 1024  # a deferring process's log starts over at this length
WAL_CHECKPOINT_INTERVAL_S = 1.0  # and copied back this long after the last pass
WAL_IDLE_CUT_S = 60.0  # and cut once it has not changed for this long
WAL_AUTO_TRUNCATE_BYTES = 32 * 1024 * 1024  # any other process, at this size
WAL_RESTART_WAIT_MS = 200
WAL_CATCH_UP_PASSES = 3  # passive passes at most after the first, before a RESTART or TRUNCATE
WAL_LEFT_FRAMES = 64  # one that found fewer new frames than this is the last
ERASE_WAIT_S = 10.0  # how long an erasing change waits for readers to leave the WAL
STEP_ASIDE_S = 0.05  # background writes let waiting ones go first for at most this long
STEP_ASIDE_POLL_S = 0.0001
WANT_S = 0.1  # a writer that asked for its turn this recently (``try_turn``) still wants it


class Wal:
    """One process's view of a SQLite database's WAL (see the module docstring)."""

    def __init__(self, database_path: str) -> None:
        self.path = database_path + "-wal"
        self.checkpointed_at = 0.0  # monotonic time of the last checkpoint or size check
        self._passed: tuple[int, int] = (0, 0)  # the file's (size, mtime) after the last pass
        self._changed_at = time.monotonic()  # of the last pass that found the file changed
        self._primed = False  # the last pass started the log over itself (``_prime``)
        self._frame_bytes = 0  # a frame: the page size and its header (read once)
        self._restarting = threading.Lock()  # held by a RESTART or TRUNCATE pass
        self._writer = threading.RLock()  # held by this process's write transaction
        self._queued = 0  # this process's write transactions waiting for ``_writer``
        self._queue_lock = threading.Lock()
        self._wanted_at = -math.inf  # when a ``try_turn`` last found the turn taken
        self._syncing = threading.Lock()  # held by a ``sync`` under way
        self._syncs_begun = self._syncs_ended = 0  # ``sync``'s: the last begun, the last ended

    def _look(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return (0, 0)
        return (st.st_size, st.st_mtime_ns)

    def size(self) -> int:
        """The WAL file's size in bytes."""
        return self._look()[0]

    def sync(self) -> None:
        """Make every commit so far survive a power loss (an explicit ``fsync`` through a
        mount). At ``synchronous=NORMAL`` SQLite syncs the log only when it checkpoints or
        starts it over; every checkpoint syncs the database file before the log is rewound, so
        the log is all there is left to sync. On a descriptor of its own, opened and closed
        here: SQLite takes POSIX locks on the database and ``-shm`` files only, never on this
        one, so closing it drops none of theirs (see the module docstring). One at a time, and
        a caller that waited for another's is done once one begun after it came has ended:
        many programs' ``fsync`` at once cost a disk flush or two, not one each."""
        wanted = self._syncs_begun + 1  # any sync begun from now on covers this caller
        with self._syncing:
            if self._syncs_ended >= wanted:
                return
            self._syncs_begun += 1  # only here, under the lock
            begun = self._syncs_begun
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                fd = None  # no log: every commit is in the database file, synced when copied
            if fd is not None:
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            self._syncs_ended = begun

    def due(self) -> bool:
        """Whether a deferring process's checkpoint has anything to do now (``due_in``)."""
        wait = self.due_in()
        return wait is not None and wait <= 0

    def due_in(self) -> float | None:
        """Seconds until a deferring process's checkpoint has anything to do (0 or less: now),
        if nobody writes meanwhile; None while nothing will (an empty file). Now if the file
        changed since the last pass; else a pass due by time once no pass came for the
        interval, or, for a log the last pass copied and primed, the cut once it has been
        idle for ``WAL_IDLE_CUT_S`` (passes in between would find nothing to do). A stat, no
        query."""
        look = self._look()
        if look[0] == 0:
            return None
        if look != self._passed:
            return 0.0
        if self._primed:
            return self._changed_at + WAL_IDLE_CUT_S - time.monotonic()
        return self.checkpointed_at + WAL_CHECKPOINT_INTERVAL_S - time.monotonic()

    def due_by_time(self) -> bool:
        return time.monotonic() - self.checkpointed_at >= WAL_CHECKPOINT_INTERVAL_S

    def idle(self) -> bool:
        """Whether the file has not changed for ``WAL_IDLE_CUT_S`` (as passes saw it): the
        next pass cuts it."""
        return time.monotonic() - self._changed_at >= WAL_IDLE_CUT_S

    def passed(self) -> None:
        """Note a pass (see ``due`` and ``idle``)."""
        self.checkpointed_at = time.monotonic()
        look = self._look()
        if look != self._passed:
            self._changed_at = self.checkpointed_at
        self._passed = look

    def cut_due(self) -> bool:
        """For a process that does not defer checkpoints, after its commit: whether its WAL
        has grown past ``WAL_AUTO_TRUNCATE_BYTES`` (a stat at most once a second)."""
        now = time.monotonic()
        if now - self.checkpointed_at < WAL_CHECKPOINT_INTERVAL_S:
            return False
        self.checkpointed_at = now
        return self.size() >= WAL_AUTO_TRUNCATE_BYTES

    def rewind(self, conn: Any, *, cut: bool, prime: bool = False) -> bool:
        """A passive pass (the copying; no lock held), then, once the log has reached
        ``WAL_CHECKPOINT_BYTES``, a RESTART pass, or with ``cut`` always a TRUNCATE one, that
        waits at most ``WAL_RESTART_WAIT_MS`` while this process's own writes step aside; True
        unless that pass found readers or writers in the way. With ``prime`` (the writes have
        let up), a log the pass copied whole is started over here (``_prime``), and a log that
        nobody wrote to since it was is left alone."""
        if self._primed:
            # Nobody wrote since the pass that primed it: its one frame is the primer's. (The
            # file, not ``data_version``: that counts per connection, and the pass may come
            # from another thread, with a connection of its own, than the one that primed.)
            if not cut and self._look() == self._passed:
                return True
            self._primed = False
        if not self._frame_bytes:
            self._frame_bytes = conn.execute("PRAGMA page_size").fetchone()[0] + 24
        _, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if not cut and frames * self._frame_bytes < WAL_CHECKPOINT_BYTES:
            if prime and 0 < frames == copied:
                self._prime(conn)
            return True  # copied back; -1 frames: busy, it could not even look
        # What the saves committed while that pass copied, copied too while they go on, until
        # little came in during the last: the pass that stops them then has little to copy.
        for _ in range(WAL_CATCH_UP_PASSES):
            before = frames
            frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
            if frames - before <= WAL_LEFT_FRAMES:
                break
        mode = "TRUNCATE" if cut else "RESTART"
        conn.execute(f"PRAGMA busy_timeout = {WAL_RESTART_WAIT_MS}")
        try:
            with self._restarting:
                # A write of this process under way ends first, and the pass is let in at
                # once, not by SQLite's busy handler's sleeps of 1, 2, 5... ms.
                mine = self._writer.acquire(timeout=WAL_RESTART_WAIT_MS / 1000)
                try:
                    busy = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[0]
                finally:
                    if mine:
                        self._writer.release()
        finally:
            conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        return not busy

    def _prime(self, conn: Any) -> None:
        """Start a log copied whole over now, off the save path: the next writer would,
        writing and syncing its header first (a save after a pause ~1 ms slower on ext4).
        A commit that changes nothing (``user_version`` set to itself, one frame) does it here
        instead; the next save appends to it. Skipped when a write of this process or another
        is under way (that one starts the log over itself)."""
        if conn.in_transaction or not self._writer.acquire(blocking=False):
            return
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                conn.execute(f"PRAGMA user_version = {version}")
                conn.execute("COMMIT")
            except sqlite3.OperationalError:  # busy (another process writes), a full disk
                with suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                return
            finally:
                conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            self._primed = True
        finally:
            self._writer.release()

    def take_turn(self) -> None:
        """Wait for this process's turn to write; ``end_turn`` after. Its writers queue here,
        woken at once, instead of in SQLite's busy handler, which sleeps 1, 2, 5, 10... ms
        between tries; they wait for a RESTART or TRUNCATE pass that has begun; one that has to
        wait is counted while it does (see ``step_aside``). Two plain calls, not a context
        manager: every change passes here (a generator's frames cost a change ~3 µs)."""
        if self._restarting.locked() and self._restarting.acquire(
            timeout=WAL_RESTART_WAIT_MS / 1000
        ):
            self._restarting.release()
        if not self._writer.acquire(blocking=False):
            with self._queue_lock:
                self._queued += 1
            try:
                self._writer.acquire()
            finally:
                with self._queue_lock:
                    self._queued -= 1

    def try_turn(self) -> bool:
        """This process's turn to write if it can be had at once (``end_turn`` after); False
        while another thread of this process writes or a RESTART pass is under way. A writer
        that asks again and again this way counts as waiting for ``step_aside`` while it
        asks (``WANT_S``)."""
        if not self._restarting.locked() and self._writer.acquire(blocking=False):
            self._wanted_at = -math.inf
            return True
        self._wanted_at = time.monotonic()
        return False

    def end_turn(self) -> None:
        self._writer.release()

    def step_aside(self) -> None:
        """For background work between its write transactions (the search catch-up's
        batches): let this process's waiting writers go first, for up to ``STEP_ASIDE_S``.
        The lock is not fair: a thread that releases it and asks again at once gets it back
        before a waiting one wakes up (measured: a mount's save waited 30-70 ms, once a
        second, for a whole catch-up of many batches)."""
        deadline = time.monotonic() + STEP_ASIDE_S
        while (now := time.monotonic()) < deadline and (
            self._queued or now - self._wanted_at < WANT_S
        ):
            time.sleep(STEP_ASIDE_POLL_S)
