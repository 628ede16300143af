"""Files and directories mnemofs makes are owner-only, whatever the umask: 0600 and 0700.

Memory is private data: the database, its ``-wal``/``-shm`` (SQLite gives them the database
file's mode), the data directory, mount records and logs, the sync worker's state and copies.
A umask can only take bits away, so creating with these modes is enough for what we make; what
existed before is tightened where mnemofs owns the place (its default directories).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path | str, *, tighten: bool = True) -> int | None:
    """Make ``path`` (and missing parents) 0700. With ``tighten``, an existing ``path`` that
    others could enter is made 0700 too; returns its old mode when it was, else None."""
    missing = []
    walk = Path(path).absolute()
    while not walk.exists():
        missing.append(walk)
        walk = walk.parent
    for directory in reversed(missing):  # parents made here are owner-only too
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if tighten and mode & 0o077:
        os.chmod(path, DIR_MODE)
        return mode
    return None


def create_private_file(path: Path | str) -> bool:
    """Create ``path`` empty and 0600 if it does not exist; True if this call made it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def write_private(target: os.PathLike[str] | str, data: bytes) -> None:
    """Replace ``target`` (in a directory the caller trusts) atomically with an owner-only file;
    a link at ``target`` is replaced, never followed."""
    directory, name = os.path.split(os.fspath(target))
    dfd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f"{name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            FILE_MODE,
            dir_fd=dfd,
        )
        try:
            os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def open_private_log(path: Path) -> IO[str]:
    """``path`` opened for appending, made 0600 (and its directory 0700) if new."""
    private_dir(path.parent)
    fd = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
    )
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, "a")
