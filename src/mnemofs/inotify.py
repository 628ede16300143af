"""Linux inotify, just enough for two jobs: wake a mount when another process commits to its
SQLite file (``FileWatch``), and tell the sync worker which local files changed (``TreeWatch``).

Every SQLite commit writes the database's ``-wal`` file (WAL mode) or the database file itself,
so a watch on their directory hears each commit from any process on the host the moment it
happens, and costs nothing while nobody writes (each write pays while it is there: a watcher
pauses it while writes go on). ``PRAGMA data_version`` then says whether the commit was someone
else's. Python has no inotify in its standard library; four libc calls via ctypes are all this
needs. Where inotify is missing (not Linux, an exotic filesystem) the mount falls back to
polling.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class FileWatch:
    """Hear writes to some files of one directory: wait until ``fileno()`` is readable, then
    ``drain()`` says whether any of them was written.

    The kernel queues an event for every ``write`` to a watched directory's files, and the
    writer pays for it: a SQLite commit is ~30 writes to its ``-wal`` file, and a watch on the
    directory made a commit in one process ~25 µs slower (a create 180 -> 213 µs, a delete
    91 -> 116), whoever watches. ``pause()`` takes the watch away (nothing is heard) and
    ``resume()`` puts it back, so that a watcher can listen only while writes are rare."""

    MASK = IN_MODIFY | IN_CREATE | IN_MOVED_TO

    def __init__(self, paths: list[str]) -> None:
        if not paths:
            raise OSError(errno.EINVAL, "nothing to watch")
        self.directory = os.path.dirname(paths[0])
        self.names = {os.fsencode(os.path.basename(p)) for p in paths}
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd: int = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self._wd: int | None = None
        try:
            self.resume()
        except OSError:
            os.close(fd)
            raise

    @property
    def listening(self) -> bool:
        return self._wd is not None

    def resume(self) -> None:
        """Hear writes again (from now on: what was written while paused was not heard)."""
        if self._wd is None:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(self.directory), self.MASK)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"cannot watch {self.directory}")
            self._wd = wd

    def pause(self) -> None:
        """Stop hearing writes, and forget what was heard and not drained."""
        if self._wd is not None:
            self._libc.inotify_rm_watch(self.fd, self._wd)
            self._wd = None
        self.drain()

    def fileno(self) -> int:
        return self.fd

    def drain(self) -> bool:
        """Read every pending event; True if one was about a watched file."""
        hit = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return hit
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, _, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                hit = hit or name in self.names
                offset += _EVENT.size + length

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class TreeWatch:
    """Files changed under a folder tree since the last ``drain()``, as store paths (``/a/b``).

    ``drain()`` returns None when only a full look can tell: the kernel's queue overflowed, or a
    directory was made, moved or removed (its watches would then name the wrong paths). The
    caller scans everything and makes a new ``TreeWatch``.
    """

    MASK = (
        IN_MODIFY
        | IN_ATTRIB
        | IN_CLOSE_WRITE
        | IN_MOVED_FROM
        | IN_MOVED_TO
        | IN_CREATE
        | IN_DELETE
        | IN_DELETE_SELF
        | IN_MOVE_SELF
    )
    # A directory swapped for a link between the scan and the watch is never followed.
    ADD = MASK | IN_ONLYDIR | IN_DONT_FOLLOW

    def __init__(self, folder: str) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd: int = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self.dirs: dict[int, str] = {}  # watch descriptor -> store prefix ("" for the folder)
        self._add_tree(folder, "")

    def _add_tree(self, directory: str, prefix: str) -> None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), self.ADD)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"cannot watch {directory}")
        self.dirs[wd] = prefix
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                self._add_tree(entry.path, f"{prefix}/{entry.name}")

    def drain(self) -> set[str] | None:
        files: set[str] = set()
        whole = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                prefix = self.dirs.get(wd)
                if mask & (IN_Q_OVERFLOW | IN_ISDIR | IN_DELETE_SELF | IN_MOVE_SELF):
                    whole = True
                elif prefix is not None and name and not mask & IN_IGNORED:
                    files.add(f"{prefix}/{os.fsdecode(name)}")
        return None if whole else files

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
