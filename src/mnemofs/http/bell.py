"""What wakes the long polls' look (revisions.py): a commit to the database, heard.

The look used to run every 50 ms while any poll waited, and every remote mount and sync
worker keeps one poll waiting: a server with one idle remote mount used 1.2-1.3% of a core
(0.2% with none), nearly all of it the twenty wake-ups a second (~250 µs of CPU each on this
host), not the query. Now the look waits to hear a commit, as a mount's watcher does
(fs/mount.py): on SQLite, inotify on the database's files, which every commit of any process
on the host writes; on PostgreSQL, ``NOTIFY`` on the changes' channel, which every server
sends after its commits (store/notices.py; the listening connection turns readable for this
server's own too, though its ``drain`` leaves them out of what it names). A commit is looked
for at once, where it waited for the next of the 50 ms looks; an idle server looks once every
``QUIET_LOOK_S`` in case something was missed.

While commits keep coming (a mount saving through this server) the bell looks every
``LOOK_S`` instead of listening: on SQLite a watch taxes each of the database's writes while it
is there, so it is taken away for ``BUSY_S`` after each commit heard, as a mount's is. Without
inotify, or while PostgreSQL cannot be listened to (tried again every ``RELISTEN_S``), the look
runs every ``LOOK_S`` as before.
"""

from __future__ import annotations

import logging
import math

import anyio

from mnemofs.inotify import FileWatch
from mnemofs.store.listener import Listener
from mnemofs.store.service import MemoryService

log = logging.getLogger("mnemofs.http")

LOOK_S = 0.05  # the looks' pace while commits come, or with nothing to hear them by
QUIET_LOOK_S = 1.0  # with nothing heard, a look anyway this often (the safety net)
BUSY_S = 1.0  # SQLite: after a commit is heard, look every LOOK_S this long, then listen again
RELISTEN_S = 5.0  # PostgreSQL: how often to try listening again once the listener broke
SETTLE_S = 0.002  # SQLite: a commit is heard at its first write; the look waits this long


class Bell:
    """``rung`` returns when the database may have moved (or a look is due anyway);
    ``listen`` before the looks begin, ``rest`` once no poll waits."""

    def __init__(self, service: MemoryService | None = None) -> None:
        self._service = service
        self._files: FileWatch | None = None  # SQLite: the files every commit writes
        self._listener: Listener | None = None  # PostgreSQL: the changes' channel
        self._heard = -math.inf  # when the files were last heard (and the watch taken away)
        self._lost = -math.inf  # when the listener last failed or could not be made
        files = service.commit_files() if service is not None else []
        if files:
            try:
                self._files = FileWatch(files)
                self._files.pause()  # until a poll waits
            except OSError as exc:
                log.info("no inotify (%s): polls look every %.2f s", exc, LOOK_S)

    async def listen(self) -> None:
        """Polls wait: hear what comes from now on. The caller looks after this (whatever
        came before was not heard)."""
        if self._files is not None:
            if anyio.current_time() - self._heard >= BUSY_S:
                self._resume(self._files)
        elif (
            self._service is not None
            and self._listener is None
            and anyio.current_time() - self._lost >= RELISTEN_S
        ):
            await self._open_listener(self._service)

    async def rung(self, looked: float) -> None:
        """Return once a commit was heard (a look at most every ``LOOK_S`` from ``looked``, the
        last look's time), or after ``QUIET_LOOK_S`` without one."""
        files, listener = self._files, self._listener
        if files is not None and files.listening:
            with anyio.move_on_after(QUIET_LOOK_S):
                while not files.drain():  # other files of the directory: a log, say
                    await anyio.wait_readable(files.fileno())
                files.pause()  # someone writes (a mount through us, likely): look, not listen
                self._heard = now = anyio.current_time()
                # A commit is seen once done (a save's takes ~0.2 ms), not at its first write.
                await anyio.sleep_until(max(looked + LOOK_S, now + SETTLE_S))
        elif listener is not None:
            with anyio.move_on_after(QUIET_LOOK_S):
                await anyio.wait_readable(listener.fileno())
                await anyio.sleep_until(looked + LOOK_S)
            self._drain(listener)
        else:
            await anyio.sleep_until(looked + LOOK_S)

    def rest(self) -> None:
        """No poll waits: the watch is taken away (it would tax every write); what PostgreSQL
        sent is read, so that it does not pile up."""
        if self._files is not None:
            self._files.pause()
        if self._listener is not None:
            self._drain(self._listener)

    def close(self) -> None:
        if self._files is not None:
            self._files.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _resume(self, files: FileWatch) -> None:
        try:
            files.resume()
        except OSError as exc:
            log.warning(
                "cannot watch %s (%s): polls look every %.2f s", files.directory, exc, LOOK_S
            )
            files.close()
            self._files = None

    def _drain(self, listener: Listener) -> None:
        try:
            listener.drain()
        except Exception as exc:  # the connection broke: look every LOOK_S, listen again later
            log.warning("lost the change notifications (%s); polls look every %.2f s", exc, LOOK_S)
            listener.close()
            self._listener = None
            self._lost = anyio.current_time()

    async def _open_listener(self, service: MemoryService) -> None:
        try:  # a connect may block: not on the event loop
            self._listener = await anyio.to_thread.run_sync(service.listen_for_changes)
        except Exception as exc:
            log.warning("cannot listen for changes (%s); polls look every %.2f s", exc, LOOK_S)
            self._lost = anyio.current_time()
        else:
            if self._listener is None:  # a database without notifications
                self._service = None
