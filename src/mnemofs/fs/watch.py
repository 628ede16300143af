"""Linux inotify, just enough to wake a mount when another process commits to its SQLite file.

Every SQLite commit writes the database's ``-wal`` file (WAL mode) or the database file itself,
so a watch on their directory hears each commit from any process on the host the moment it
happens, and costs nothing while nobody writes. ``PRAGMA data_version`` then says whether the
commit was someone else's. Python has no inotify in its standard library; three libc calls via
ctypes are all this needs. Where inotify is missing (not Linux, an exotic filesystem) the mount
falls back to polling.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct

IN_MODIFY = 0x002
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class FileWatch:
    """Hear writes to some files of one directory: wait until ``fileno()`` is readable, then
    ``drain()`` says whether any of them was written."""

    def __init__(self, paths: list[str]) -> None:
        if not paths:
            raise OSError(errno.EINVAL, "nothing to watch")
        directory = os.path.dirname(paths[0])
        self.names = {os.fsencode(os.path.basename(p)) for p in paths}
        libc = ctypes.CDLL(None, use_errno=True)
        fd: int = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        mask = IN_MODIFY | IN_CREATE | IN_MOVED_TO
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            code = ctypes.get_errno()
            os.close(fd)
            raise OSError(code, f"cannot watch {directory}")

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
