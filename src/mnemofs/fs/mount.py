"""Mount lifecycle: clean up a stale mount, mount, serve, watch for changes, unmount cleanly.

pyfuse3 keeps its session in module globals, so one process serves one mount. ``serve`` runs in
the foreground until SIGINT/SIGTERM or an external unmount; on the way out it saves every open
file before the kernel lets go of the mount.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import math
import os
import signal
import time
from collections.abc import Callable

import pyfuse3
import trio

from mnemofs.backend import Backend, ChangeSignal
from mnemofs.errors import Unavailable
from mnemofs.fs import loop
from mnemofs.fs.access import Owner
from mnemofs.fs.adapter import Adapter, drop_caches
from mnemofs.fs.core import MemoryFs
from mnemofs.inotify import FileWatch
from mnemofs.models import Session
from mnemofs.mounts import (
    MountOptions,
    lazy_unmount,
    mount_type,
    pid_alive,
    read_record,
    record_path,
    write_record,
)

log = logging.getLogger("mnemofs.mount")

POLL_INTERVAL_S = 0.25  # SQLite without inotify: changes made elsewhere show within this
SQLITE_FALLBACK_S = 1.0  # SQLite with inotify: a look even if nothing was heard
# After a commit is heard, wait this long since the last look before looking again: an
# isolated change shows at once, a burst of them costs each mount at most 1/LOOK_INTERVAL_S
# refreshes a second (measured with 4 mounts on 2 cores: looking after every commit took 40%
# of the writers' throughput).
LOOK_INTERVAL_S = 0.05
# NOTIFY (PostgreSQL) wakes the watcher for this mount's own commits too (told after them, at
# most every 50 ms: store/notices.py; dropped by their sender's pid); a look that found nothing
# new is followed by this pause, so own saves wake it at most 200 times a second (A/B runs of
# 1,000 saves/s put the cost of a wakeup per save at 0-15%, inside this machine's noise).
QUIET_LOOK_PAUSE_S = 0.005
# SQLite: inotify taxes every write to the watched files (~25 µs a commit, see FileWatch), so a
# write heard pauses the watch, and the watcher looks every LOOK_INTERVAL_S instead until this
# long has passed; then it listens again. A burst of this mount's saves (or anyone's) is taxed
# about once a second, and an idle mount still hears the first change at once.
BUSY_LOOKS_S = 1.0
PROMOTE_INTERVAL_S = 0.25  # how often temp files left alone are looked at
# A save writes ~15 pages to the SQLite WAL: at 1,500 saves/s that is ~90 MB/s, so a look every
# 0.25 s let the WAL pass 60 MiB between two checkpoints (issue 17 bounds it at 64 MiB).
CHECKPOINT_LOOK_S = 0.1
RECONNECT_INTERVAL_S = 0.5  # while the database is unreachable, try this often
# Freed memory stays in the C heap, where a burst's buffers (a file's bytes are held from its
# open to its save) leave it scattered: 2,400 files of 100 KB written and removed left the
# daemon at 164 MB (37 before). glibc's malloc_trim gives the free pages back (44 MB); the
# upkeep calls it when it goes to rest, at most this often.
TRIM_INTERVAL_S = 10.0
TRIM_REST_S = 1.0  # ...and only before a rest at least this long
_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's; not in every libc


class MountError(Exception):
    """The mount could not be made (busy root, missing FUSE, ...)."""


def prepare_root(root: str) -> None:
    """Create ``root``; clean up a mount left by a crash; refuse one that is still served."""
    try:
        os.stat(root)
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:  # "Transport endpoint is not connected": a dead daemon
            log.warning("cleaning up a stale mount at %s", root)
            lazy_unmount(root)
        elif exc.errno != errno.ENOENT:
            raise MountError(f"cannot use {root}: {exc.strerror}") from None
    kind = mount_type(root)
    if kind is not None and kind.startswith("fuse"):
        record = read_record(root)
        pid = record.get("pid") if record else None
        if isinstance(pid, int) and pid_alive(pid):
            raise MountError(f"{root} is already mounted by mnemofs (pid {pid})")
        if record is not None or kind == "fuse.mnemofs":  # a dead daemon's mount
            lazy_unmount(root)
        else:
            raise MountError(f"{root} is already a FUSE mount point ({kind})")
    # Any other mount here (a bind mount of the directory onto itself, made shared so that
    # containers see our mount: see the README) is fine to mount over.
    os.makedirs(root, exist_ok=True)


class Rest:
    """The upkeep's sleep between looks when it has nothing to do: until its next work is due
    (``Backend.upkeep_in``), and with none due, until the mount's next request after a pause
    (``wake``, from the request loop: requests may write), so an idle mount does not wake up.
    Without that wake-up (pyfuse3's own request loop), a look every ``CHECKPOINT_LOOK_S``."""

    def __init__(self, woken: bool) -> None:
        self.woken = woken
        self._event: trio.Event | None = None

    def wake(self) -> None:
        if self._event is not None:
            self._event.set()

    async def until(self, wait: float | None) -> bool:
        """Rest; whether a request ended it (rather than the time)."""
        if not self.woken:
            wait = CHECKPOINT_LOOK_S if wait is None else min(wait, CHECKPOINT_LOOK_S)
        self._event = event = trio.Event()
        try:
            with trio.move_on_after(math.inf if wait is None else wait):
                await event.wait()
        finally:
            self._event = None
        return event.is_set()


async def _watch_changes(fs: MemoryFs, service: Backend, rest: Rest) -> None:
    """Notice changes made elsewhere and temp files left alone; drop what the kernel cached.

    PostgreSQL wakes us with NOTIFY, a remote mount its long poll (and we look anyway once the
    signal's ``quiet_look_s`` passed without one; if the listening connection breaks we poll
    until it can be made again). On SQLite inotify wakes us when any process writes the
    database's files, and ``data_version`` then tells within microseconds whether someone else
    committed; while writes go on we look every ``LOOK_INTERVAL_S`` instead of listening
    (``BUSY_LOOKS_S``); without inotify, a look every ``POLL_INTERVAL_S``. While the database is
    unreachable, FUSE requests that need it fail at once with EIO (a change waits out its first
    seconds, ``Patience.unreachable``) and this task tries to reach it from a worker thread;
    once back, it catches up on every change. What it hears and the
    temp files it saves may leave work for the upkeep (the WAL to copy back, the search index to
    catch up): it wakes it (``Rest``).
    """
    watched = {m.store_id for m in fs.mounts}
    listener = _listen(service)
    commits = _watch_commits(service) if listener is None else None
    heard = trio.current_time()  # when ``commits`` last heard a write (and was paused)
    seen = service.data_version()
    promoted = time.monotonic()
    looked = trio.current_time()
    changed_last = True
    # The first pass looks without waiting: a commit made after the tree was first read but
    # before LISTEN (or the data_version read above) woke no one, and the daemon has already
    # said it is mounted.
    first = True
    try:
        while True:
            changed = True
            adopt = False  # a look while this mount writes, which may take its own as seen
            if first:
                first = False
            elif service.unavailable is not None:
                await _reconnect(service)
                if listener is not None:
                    listener.close()
                listener = _listen(service)
            else:
                try:
                    if listener is not None:
                        if not changed_last:  # our own commits are heard too: pace them
                            await trio.sleep(QUIET_LOOK_PAUSE_S)
                        quiet = listener.quiet_look_s
                        # Temp files left alone are looked at on time however quiet it is.
                        patience = min(quiet, PROMOTE_INTERVAL_S) if fs.temporaries else quiet
                        with trio.move_on_after(patience) as waiting:
                            await trio.lowlevel.wait_readable(listener.fileno())
                            await trio.sleep_until(looked + LOOK_INTERVAL_S)
                            changed = bool(listener.drain() & watched)
                        if waiting.cancelled_caught:  # nothing heard: a look once it is due
                            changed = trio.current_time() - looked >= quiet
                    else:
                        if commits is None:
                            await trio.sleep(POLL_INTERVAL_S)
                        elif commits.listening:
                            with trio.move_on_after(SQLITE_FALLBACK_S):
                                await trio.lowlevel.wait_readable(commits.fileno())
                                # Someone writes (this mount, likely): look every
                                # LOOK_INTERVAL_S for a while instead of taxing every write.
                                commits.pause()
                                heard = trio.current_time()
                                await trio.sleep_until(looked + LOOK_INTERVAL_S)
                        else:
                            await trio.sleep(LOOK_INTERVAL_S)
                            if trio.current_time() - heard >= BUSY_LOOKS_S:
                                commits = _resume(commits)  # the look below sees what came before
                        version = service.data_version()
                        changed = version is None or version != seen
                        seen = version
                        adopt = commits is not None and not commits.listening
                        if version is None:  # PostgreSQL without a listener: try again
                            listener = _listen(service)
                except Exception as exc:
                    log.warning("lost the change notifications (%s); polling", exc)
                    if listener is not None:
                        listener.close()
                    listener = None
            changed_last = changed
            try:
                if adopt and not changed:
                    # Nobody else wrote: what moved is ours, taken as seen, unless that cannot
                    # be said (an eviction a save made, a change the tree may not show yet).
                    changed = not fs.adopt_own(seen)
                if changed:
                    # Only a look that found news counts toward LOOK_INTERVAL_S: a commit is
                    # heard at its first write, often before it is visible, and the look that
                    # finds nothing is microseconds; the looks that follow it see the commit.
                    looked = trio.current_time()
                    states = listener.heard_states() if listener is not None else None
                    await drop_caches(fs.refresh(states))
                    rest.wake()
                if time.monotonic() - promoted >= PROMOTE_INTERVAL_S:
                    promoted = time.monotonic()
                    if fs.promote_temporaries():
                        rest.wake()
            except Unavailable as exc:
                fs.in_step = False
                log.warning("cannot look for changes: %s", exc)
            except Exception:
                fs.in_step = False
                # The next look refreshes whatever it hears: what this one failed to read may
                # be the last change for a long time (on PostgreSQL it always would).
                seen = None
                log.exception("watching for changes failed; retrying")
    finally:
        if listener is not None:
            listener.close()
        if commits is not None:
            commits.close()


def _resume(commits: FileWatch) -> FileWatch | None:
    """Listen again; None (look every ``POLL_INTERVAL_S`` from now on) if that fails."""
    try:
        commits.resume()
    except OSError as exc:
        log.warning("cannot watch %s again (%s); polling", commits.directory, exc)
        commits.close()
        return None
    return commits


def _watch_commits(service: Backend) -> FileWatch | None:
    files = service.commit_files()
    if not files:
        return None
    try:
        return FileWatch(files)
    except OSError as exc:
        log.info("no inotify (%s): looking for changes every %.2f s", exc, POLL_INTERVAL_S)
        return None


async def _reconnect(service: Backend) -> None:
    """Wait until the database can be reached again, trying from a worker thread (a connect to
    a vanished host can block for seconds; FUSE requests must not wait for it)."""
    log.warning("database unreachable (%s); reconnecting in the background", service.unavailable)
    started = time.monotonic()
    while True:
        await trio.sleep(RECONNECT_INTERVAL_S)
        try:
            await trio.to_thread.run_sync(service.probe, abandon_on_cancel=True)
        except Unavailable:
            continue
        log.warning("database reachable again after %.1f s", time.monotonic() - started)
        return


def _listen(service: Backend) -> ChangeSignal | None:
    try:
        return service.listen_for_changes()
    except Exception:
        log.debug("cannot listen for change notifications; polling", exc_info=True)
        return None


async def _checkpoint(service: Backend, rest: Rest) -> None:
    """In a worker thread, off the save path, once due: keep the SQLite WAL small (a look every
    ``CHECKPOINT_LOOK_S`` while it grows, see ``Database.checkpoint``), catch the search index
    up, and write the reads noted for 'evict-lru' (``Backend.checkpoint``). In between, and
    while there is nothing to do, it rests (``Rest``)."""
    trimmed = -math.inf
    owed = False  # requests came or work was done since the last trim
    while True:
        await trio.sleep(CHECKPOINT_LOOK_S)
        if service.unavailable is not None:
            continue
        try:
            wait = service.upkeep_in()  # asked here: a trip to a thread costs more
            if owed and _trim is not None and (wait is None or wait >= TRIM_REST_S):
                # Going to rest a while (a WAL written last waits a minute to be cut): give
                # back what is free, or rest only until that is due.
                due = trimmed + TRIM_INTERVAL_S - trio.current_time()
                if due <= 0:
                    owed, trimmed = False, trio.current_time()
                    await trio.to_thread.run_sync(_trim, 0)
                else:
                    wait = due if wait is None else min(wait, due)
            if wait is None or wait > 0:
                owed = await rest.until(wait) or owed
                continue
            owed = True
            await trio.to_thread.run_sync(service.checkpoint)
        except Exception as exc:
            log.warning("background write failed (%s); retrying", exc)


async def _watch_signals(early: list[int]) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        if early:  # came between "mounted" and now: handled the same way
            log.info("got %s: unmounting", signal.Signals(early[0]).name)
            pyfuse3.terminate()
            return
        async for signum in signals:
            log.info("got %s: unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()
            return


async def _serve(fs: MemoryFs, service: Backend, early: list[int], rest: Rest) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, early)
        nursery.start_soon(_watch_changes, fs, service, rest)
        nursery.start_soon(_checkpoint, service, rest)
        # One worker: no handler awaits (every call is a short synchronous step, see
        # fs/core.py), so more workers only add task switches to every request; but a change
        # that pauses for another process's lock has a spare task serve the others (loop.py).
        loop.serve_spares(nursery)
        await pyfuse3.main(min_tasks=1, max_tasks=1)
        nursery.cancel_scope.cancel()


def serve(
    service: Backend,
    session: Session,
    options: MountOptions,
    *,
    ready: Callable[[], None] | None = None,
) -> None:
    """Mount ``session`` at ``options.root`` and serve until a signal or an unmount."""
    if session.ended_at is not None:
        raise MountError(f"session {session.id} has ended")
    if not os.path.exists("/dev/fuse"):
        raise MountError("/dev/fuse is missing: this machine cannot mount FUSE filesystems")
    prepare_root(options.root)
    service.defer_checkpoints()  # commits here, checkpoints on a worker, waits for PG spin
    service.defer_reconnects()  # never block requests on an unreachable server
    fs = MemoryFs(service, session, actor=session.id)
    owner = Owner(
        os.getuid() if options.uid is None else options.uid,
        os.getgid() if options.gid is None else options.gid,
        group=options.group_access,
    )
    ops = Adapter(fs, owner)
    # No default_permissions: the kernel would answer EACCES for a read-only store before we
    # could say EROFS. The adapter checks every request itself (fs/access.py): owner-only by
    # default, as the modes 0600/0700 say.
    fuse_options = {"fsname=mnemofs", "subtype=mnemofs"}
    if options.allow_other:
        fuse_options.add("allow_other")
    if options.debug:
        fuse_options.add("debug")
    record = record_path(options.root)  # before mounting: resolving the path stats the root
    try:
        pyfuse3.init(ops, options.root, fuse_options)
    except RuntimeError as exc:
        raise MountError(f"cannot mount at {options.root}: {exc}") from None
    rest = Rest(woken=False)
    rest.woken = loop.install(woken=rest.wake)
    started = time.monotonic()
    # A SIGTERM from here until trio listens must not kill the daemon with files unsaved:
    # noted now, acted on as soon as the signal watcher runs.
    early: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _frame: early.append(number))
    try:
        with write_record(record, options.root, session):
            if ready is not None:
                ready()
            trio.run(_serve, fs, service, early, rest)
    finally:
        failures = fs.save_all()
        for path, error in failures:
            log.error("could not save %s at unmount: %s", path, error)
        try:
            service.flush_accesses()
        except Exception as exc:  # advisory: the last second of reads is all that is lost
            log.warning("could not record the last reads: %s", exc)
        try:
            pyfuse3.close(unmount=True)
        except Exception:  # an external unmount already tore it down
            log.debug("unmount after close", exc_info=True)
        log.info("unmounted %s after %.1f s", options.root, time.monotonic() - started)
