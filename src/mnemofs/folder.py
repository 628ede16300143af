"""A local folder that is never left through a symbolic link (the sync worker's file access).

Every operation walks the path from a descriptor of the folder itself, one component at a
time, opening each directory with ``O_NOFOLLOW`` relative to its parent's descriptor, and
then acts on the last component relative to that descriptor (``openat``, ``fstatat``,
``renameat``, ``unlinkat``, ``mkdirat``). A link anywhere on the way — there from the start
or swapped in between a check and its use — makes the call fail with ``LinkInPath``; nothing
outside the folder is ever created, changed or read. Special files (FIFOs, devices, sockets)
are refused the same way, so a FIFO cannot block a read.

Files and directories made here are owner-only (0600/0700) whatever the umask; read_only
copies are made 0400.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from mnemofs.private import DIR_MODE, FILE_MODE

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class LinkInPath(Exception):
    """The path goes through (or is) a symbolic link or a special file: never followed."""

    def __init__(self, path: str, what: str = "a symbolic link") -> None:
        super().__init__(f"{path}: {what} (never followed)")
        self.path = path
        self.what = what


class Folder:
    """The folder ``<top>/<name>``, by descriptor (see the module docstring). ``top`` is the
    caller's (trusted, opened as given); ``name`` and everything below it are never followed
    through a link. Paths are store paths: ``/a/b.md`` means ``<top>/<name>/a/b.md``."""

    def __init__(self, top: str, name: str) -> None:
        self.top = top
        self.name = name
        self.path = os.path.join(top, name)

    def exists(self, directory: str = "/") -> bool:
        """Is the folder there, or the directory ``directory`` (a store path) in it? Never
        through a link."""
        try:
            return self.is_directory(directory)
        except LinkInPath:
            return False

    def is_directory(self, directory: str) -> bool:
        """As ``exists``, but ``LinkInPath`` if the directory is or goes through a link."""
        try:
            with self._dir([p for p in directory.split("/") if p]):
                return True
        except OSError:
            return False

    def ensure(self) -> None:
        """Make the folder (0700) if it is not there."""
        with self._dir([], create=True):
            pass

    @contextmanager
    def _dir(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts`` below the folder (made if ``create``)."""
        if create:
            with contextlib.suppress(FileExistsError):
                os.makedirs(self.top, DIR_MODE)
        fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, name in enumerate([self.name, *parts]):
                where = parts[:i]
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, DIR_MODE, dir_fd=fd)
                    child = self._open_dir(name, fd, where)
                except OSError as exc:
                    self._refuse(exc, name, fd, where)
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _open_dir(self, name: str, parent: int, parts: list[str]) -> int:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            self._refuse(exc, name, parent, parts)
            raise

    @staticmethod
    def _refuse(exc: OSError, name: str, parent: int, parts: list[str]) -> None:
        """Raise ``LinkInPath`` if ``exc`` came from a link (ELOOP, or ENOTDIR on one)."""
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise LinkInPath("/" + "/".join(parts)) from None

    @staticmethod
    def _split(path: str) -> tuple[list[str], str]:
        parts = [p for p in path.split("/") if p]
        return parts[:-1], parts[-1]

    # -- reading --------------------------------------------------------------------------------

    def stat(self, path: str) -> os.stat_result | None:
        """The regular file at ``path`` (not following a link), or None if there is none.
        ``LinkInPath`` if the path is or goes through a link."""
        parents, name = self._split(path)
        try:
            with self._dir(parents) as fd:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            raise LinkInPath(path)
        return st if stat.S_ISREG(st.st_mode) else None

    def read(self, path: str) -> bytes | None:
        """The bytes of the regular file at ``path``; None if it is gone."""
        parents, name = self._split(path)
        try:
            with self._dir(parents) as dfd:
                try:
                    fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
                except OSError as exc:
                    self._refuse(exc, name, dfd, [*parents, name])
                    raise
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LinkInPath(path, "not a regular file")
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def scan(
        self, *, dirs: list[str] | None = None, hidden: list[str] | None = None
    ) -> tuple[dict[str, os.stat_result], list[str]]:
        """Every regular file (store path -> lstat) and every link or special file found
        (never entered). Names starting with ``.mnemofs`` are the worker's own: left out.
        Given ``dirs``, every directory's path is added to it; given ``hidden``, names that
        start with a dot are not entered or listed but added to it."""
        files: dict[str, os.stat_result] = {}
        refused: list[str] = []
        try:
            with self._dir([]) as fd:
                top = os.dup(fd)
        except (OSError, LinkInPath):
            return files, refused
        pending = [(top, "")]
        while pending:
            fd, prefix = pending.pop()
            try:
                with os.scandir(fd) as entries:
                    found = list(entries)
                for entry in found:
                    name = entry.name
                    if name.startswith(".mnemofs"):
                        continue
                    if hidden is not None and name.startswith("."):
                        hidden.append(f"{prefix}/{name}")
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    path = f"{prefix}/{name}"
                    if stat.S_ISDIR(st.st_mode):
                        if dirs is not None:
                            dirs.append(path)
                        try:
                            pending.append((os.open(name, _DIR_FLAGS, dir_fd=fd), path))
                        except OSError:  # replaced by a link since: not entered
                            refused.append(path)
                    elif stat.S_ISREG(st.st_mode):
                        files[path] = st
                    else:
                        refused.append(path)
            finally:
                os.close(fd)
        return files, refused

    # -- writing --------------------------------------------------------------------------------

    def make_directory(self, directory: str) -> None:
        """Make the directory ``directory`` (a store path) and any missing above it (0700)."""
        with self._dir([p for p in directory.split("/") if p], create=True):
            pass

    def remove_directory(self, directory: str) -> bool:
        """Remove the directory ``directory`` if it is empty; False if it is not, or not there
        (a link there is neither followed nor removed)."""
        parents, name = self._split(directory)
        try:
            with self._dir(parents) as dfd:
                os.rmdir(name, dir_fd=dfd)  # unlinkat(AT_REMOVEDIR): ENOTDIR on a link
        except (OSError, LinkInPath):
            return False
        return True

    def write(self, path: str, data: bytes, *, mode: int = FILE_MODE) -> os.stat_result:
        """Replace the file at ``path`` with ``data`` atomically (temporary file, then rename),
        making missing directories. A link at ``path`` itself is refused too (left alone)."""
        parents, name = self._split(path)
        with self._dir(parents, create=True) as dfd:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    raise LinkInPath(path, "not a regular file")
            tmp = f".mnemofs-{name}"[:200] + f".{os.getpid()}.tmp"
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                FILE_MODE,
                dir_fd=dfd,
            )
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchmod(fd, mode)
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
        return st

    def remove(self, path: str) -> None:
        """Remove the regular file at ``path`` (a link there is refused, not removed)."""
        parents, name = self._split(path)
        try:
            with self._dir(parents) as dfd:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    raise LinkInPath(path, "not a regular file")
                os.unlink(name, dir_fd=dfd)
        except (FileNotFoundError, NotADirectoryError):
            return
