"""The pyfuse3 adapter: FUSE requests in, ``MemoryFs`` calls, attributes and errnos out.

It translates only: names from bytes, nodes to ``EntryAttributes``, domain errors to
``FUSEError`` (``errno_for``). Unexpected faults are logged once and become ``EIO``. And a
change whose write finds a lock taken by another process (SQLite's; on PostgreSQL a store's
row) is made again after a pause in which the mount serves its other requests
(``Adapter._change``).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import stat
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyfuse3
import trio

from mnemofs import errors, limits
from mnemofs.fs import loop
from mnemofs.fs.access import Owner
from mnemofs.fs.core import ROOT_INO, FsError, Invalidation, MemoryFs, Node
from mnemofs.fs.nodes import errno_for
from mnemofs.fs.notices import DISK_FULL_HINT
from mnemofs.paths import decode_name

log = logging.getLogger("mnemofs.fs")
T = TypeVar("T")

# How long the kernel may keep names and attributes without asking. Every change it cannot see
# for itself is invalidated the moment the mount learns of it (changes made elsewhere, in
# refresh.py; a save rolled back, in files.py), so this only bounds the cost of a missed one.
# At 1 s, every phase of a workload longer than a second looked each file up again.
TIMEOUT_S = 60.0
CROWD_PAUSE_MAX_S = 0.5  # the longest pause of a change waiting among many (``_change``)
XATTRS = (b"user.mnemofs.memory_id", b"user.mnemofs.version_id", b"user.mnemofs.sha256")


def fuse_error(exc: Exception, what: str) -> pyfuse3.FUSEError:
    """The FUSEError to raise for ``exc`` (``raise fuse_error(exc, "lookup") from None``)."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc
    if isinstance(exc, (FsError, errors.MnemofsError)):
        code = errno_for(exc)
        # A refused credential is the agent's to fix and the admin's to know of: logged.
        level = logging.WARNING if isinstance(exc, errors.SecretDetected) else logging.DEBUG
        log.log(level, "%s: %s (%s)", what, exc, errno.errorcode.get(code, code))
        return pyfuse3.FUSEError(code)
    log.error("%s failed unexpectedly", what, exc_info=exc)
    return pyfuse3.FUSEError(errno.EIO)


def _name(raw: bytes) -> str:
    return decode_name(raw)


class Adapter(pyfuse3.Operations):
    """pyfuse3 operations over one ``MemoryFs``."""

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, fs: MemoryFs, owner: Owner) -> None:
        super().__init__()
        self.fs = fs
        self.owner = owner
        self.uid = owner.uid
        self.gid = owner.gid
        # Modes by writability (False, True): every reply with attributes needs one.
        self._dir_modes = tuple(stat.S_IFDIR | owner.dir_mode(w) for w in (False, True))
        self._file_modes = tuple(stat.S_IFREG | owner.file_mode(w) for w in (False, True))
        self._pausing = 0  # changes waiting for a lock (``_change``)
        self._made = trio.Event()  # set when a change is made while others wait (``_change``)

    def _refused(self, exc: Exception, what: str, ino: int, name: bytes | None = None) -> Any:
        """The FUSEError for a refused change, noted in ``.mnemofs/refusals`` first."""
        error = fuse_error(exc, what)
        if isinstance(exc, errors.Unavailable) or error.errno == errno.EIO:
            # Maybe committed all the same (the database went away as it did): the tree may
            # not show it until the next look for changes reads it back.
            self.fs.in_step = False
        try:
            node = self.fs.nodes.get(ino)
            where = self.fs.where(node) if node is not None else "?"
            if name is not None:  # a name that is not UTF-8 shown with its bytes escaped
                where = (where + "/" if where != "." else "") + name.decode(
                    "utf-8", "backslashreplace"
                )
            reason = getattr(exc, "message", None) or "an internal error (see the mount's log)"
            hint = DISK_FULL_HINT if isinstance(exc, errors.StorageFull) else None
            self.fs.note_refusal(what, where, error.errno, reason, hint)
        except Exception:  # a note must never change what the caller gets
            log.debug("could not note a refusal", exc_info=True)
        return error

    async def _change(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call``, a change that may write to the store, made without the mount's thread
        waiting for SQLite's lock: while another process holds it (a CLI's import of a whole
        store, a server's or another mount's write), the call's first write raises
        ``WriteWouldWait`` having done nothing (the tree as it was too: fs/core.py's
        contract), and the call is made again after a pause in which another task serves the
        mount's other requests (``loop.aside``), as long as SQLite's busy timeout would have
        waited. On PostgreSQL the same for a row lock held by another transaction (a store's
        restore). (The server's ``runner.Inline`` makes its calls again the same way, on
        asyncio, with no spare task to start: its loop serves the others by itself.)"""
        service = self.fs.service
        patience: errors.Patience | None = None
        try:
            while True:
                # While any change pauses for a lock, every try asks only briefly (1 ms on
                # PostgreSQL; SQLite's never waits). The last try's write is refused by the
                # store (EIO), which the tree's own failure handling then sees, as it did a
                # busy timeout's (a save puts the file back).
                again = patience is not None or self._pausing > 0
                service.write_at_once(again=again, last=patience is not None and patience.over)
                try:
                    made = call(*args, **kwargs)
                except errors.WriteWouldWait:
                    if patience is None:
                        patience = errors.Patience()
                        self._pausing += 1
                    # Every try holds the mount's thread (on PostgreSQL a 1 ms wait for the
                    # lock, through a server a request): many changes waiting pause as many
                    # times longer, so that together they ask about as often as one does,
                    # each a little more or less (not all at once); the first one made wakes
                    # the others (the lock is free).
                    crowd = self._pausing * random.uniform(0.5, 1.5) if self._pausing > 1 else 1
                    pause = min(patience.pause() * crowd, CROWD_PAUSE_MAX_S)
                else:
                    if patience is not None:
                        self._made.set()
                        self._made = trio.Event()
                    return made
                finally:
                    service.write_at_once(False)  # a call that wrote nothing
                loop.aside()
                with trio.move_on_after(pause):
                    await self._made.wait()
        finally:
            if patience is not None:
                self._pausing -= 1

    async def _waiting_out(
        self, failed: errors.Unavailable, call: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        """``call``, a read of the store (an open of a file not cached) that changed nothing
        and ``failed``: made again while the database or server has been away for less than
        ``Patience.UNREACHABLE_S`` (a restart), after pauses in which other requests are
        served, as a change waits (``_change``, ``Patience.unreachable``)."""
        patience = errors.Patience()
        while True:
            if not errors.Patience.waits_out(self.fs.service.unreachable_for):
                raise failed
            loop.aside()
            await trio.sleep(patience.pause())
            try:
                return call(*args, **kwargs)
            except errors.Unavailable as exc:
                failed = exc

    def _may_write(self, ctx: Any, ino: int, what: str) -> None:
        self.fs.check_write(ino, what, allowed=self.owner.allows(ctx.uid, ctx.gid, ctx.pid))

    def _may_read(self, ctx: Any) -> None:
        if not self.owner.allows(ctx.uid, ctx.gid, ctx.pid):
            raise pyfuse3.FUSEError(errno.EACCES)

    # -- attributes -----------------------------------------------------------------------------

    def attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        """A node's attributes as a reply carries them (a listing asks for every entry's)."""
        entry = pyfuse3.EntryAttributes()
        writable = node.mount is not None and node.mount.writable and node.history is None
        if node.is_dir:
            entry.st_mode = self._dir_modes[writable]
            entry.st_nlink = 2 + node.subdirs
            size = 4096
        else:
            entry.st_mode = self._file_modes[writable]
            entry.st_nlink = 0 if node.unlinked else 1
            size = node.current_size
        entry.st_size = size
        entry.st_blocks = (size + 511) // 512
        entry.st_ino = node.ino
        entry.st_uid = self.uid
        entry.st_gid = self.gid
        entry.st_blksize = 4096
        entry.st_atime_ns = node.atime_ns or node.mtime_ns
        entry.st_mtime_ns = node.mtime_ns
        entry.st_ctime_ns = node.ctime_ns
        entry.entry_timeout = TIMEOUT_S
        # .mnemofs/ reports grow between opens: their size is asked for every time.
        entry.attr_timeout = 0 if node.report is not None else TIMEOUT_S
        return entry

    # -- lookups --------------------------------------------------------------------------------

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> Any:
        try:
            if ctx is not None:
                self._may_read(ctx)
            node = self.fs.lookup(parent_inode, _name(name))
        except errors.InvalidName as exc:
            # Every create, mkdir or rename looks its new name up first: a name the store
            # cannot hold (not UTF-8, not NFC) is refused here, and said where the agent looks.
            raise self._refused(exc, "lookup", parent_inode, name) from None
        except Exception as exc:
            raise fuse_error(exc, "lookup") from None
        if node is None:  # the new name of a create, a mkdir, a rename: one exception, not three
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.attrs(node)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, count in inode_list:
            self.fs.forget(ino, count)

    async def getattr(self, inode: int, ctx: Any = None) -> Any:
        try:
            if ctx is not None and inode != ROOT_INO:  # the mount point: stat'able, 0500
                self._may_read(ctx)
            return self.attrs(self.fs.node(inode))
        except Exception as exc:
            raise fuse_error(exc, "getattr") from None

    async def setattr(self, inode: int, attr: Any, fields: Any, fh: Any, ctx: Any) -> Any:
        try:
            owner_only = fields.update_mode or fields.update_atime or fields.update_mtime
            if fields.update_size or owner_only:
                self.fs.check_write(inode, "setattr", allowed=True)  # EROFS first
                if owner_only and ctx.uid not in (0, self.uid):  # POSIX: only the owner
                    raise FsError(errno.EPERM, "setattr: only the owner may change modes or times")
                self._may_write(ctx, inode, "setattr")
            node = await self._change(
                self.fs.setattr,
                inode,
                size=attr.st_size if fields.update_size else None,
                mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
                atime_ns=attr.st_atime_ns if fields.update_atime else None,
                mode=attr.st_mode if fields.update_mode else None,
                uid=attr.st_uid if fields.update_uid else None,
                gid=attr.st_gid if fields.update_gid else None,
                owner=(self.uid, self.gid),
                fh=fh,
            )
            return self.attrs(node)
        except Exception as exc:
            raise self._refused(exc, "setattr", inode) from None

    async def access(self, inode: int, mode: int, ctx: Any) -> bool:
        try:
            node = self.fs.node(inode)
            self._may_read(ctx)
            if mode & os.W_OK:
                self._may_write(ctx, inode, "access")
            return not (mode & os.X_OK and not node.is_dir)
        except Exception as exc:
            raise fuse_error(exc, "access") from None

    # -- directories ----------------------------------------------------------------------------

    async def opendir(self, inode: int, ctx: Any) -> int:
        try:
            self._may_read(ctx)
            node = self.fs.node(inode)
            if not node.is_dir:
                raise FsError(errno.ENOTDIR, "not a directory")
            return inode
        except Exception as exc:
            raise fuse_error(exc, "opendir") from None

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        """``.`` and ``..`` first (offsets 1 and 2), then the entries in inode order, each at
        offset inode + 2: offsets stay valid while entries change. The kernel counts no lookup
        for the dot entries."""
        try:
            here = self.fs.node(fh)
            if start_id < 1 and not pyfuse3.readdir_reply(token, b".", self.attrs(here), 1):
                return
            up = here.parent or here
            if start_id < 2 and not pyfuse3.readdir_reply(token, b"..", self.attrs(up), 2):
                return
            for name, node in self.fs.readdir(fh, max(start_id - 2, 0)):
                # Names came in through decode_name (UTF-8); os.fsencode says the same slower.
                raw = name.encode("utf-8", "surrogateescape")
                if not pyfuse3.readdir_reply(token, raw, self.attrs(node), node.ino + 2):
                    break
                self.fs.looked_up(node)
        except Exception as exc:
            raise fuse_error(exc, "readdir") from None

    async def releasedir(self, fh: int) -> None:
        return None

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> Any:
        try:
            self._may_write(ctx, parent_inode, "mkdir")
            return self.attrs(await self._change(self.fs.mkdir, parent_inode, _name(name)))
        except Exception as exc:
            raise self._refused(exc, "mkdir", parent_inode, name) from None

    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        try:
            self._may_write(ctx, parent_inode, "rmdir")
            await self._change(self.fs.rmdir, parent_inode, _name(name))
        except Exception as exc:
            raise self._refused(exc, "rmdir", parent_inode, name) from None

    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        try:
            self._may_write(ctx, parent_inode, "unlink")
            await self._change(self.fs.unlink, parent_inode, _name(name))
        except Exception as exc:
            raise self._refused(exc, "unlink", parent_inode, name) from None

    async def rename(
        self,
        parent_old: int,
        name_old: bytes,
        parent_new: int,
        name_new: bytes,
        flags: int,
        ctx: Any,
    ) -> None:
        try:
            if flags & pyfuse3.RENAME_EXCHANGE:
                raise FsError(errno.EINVAL, "RENAME_EXCHANGE is not supported")
            self._may_write(ctx, parent_old, "rename")
            self._may_write(ctx, parent_new, "rename into")
            await self._change(
                self.fs.rename,
                parent_old,
                _name(name_old),
                parent_new,
                _name(name_new),
                noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE),
            )
        except Exception as exc:
            raise self._refused(exc, "rename", parent_old, name_old) from None
        finally:
            self._forget_vanished()

    # -- files ----------------------------------------------------------------------------------

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Any) -> Any:
        try:
            self._may_write(ctx, parent_inode, "create")
            write_only = (flags & os.O_ACCMODE) == os.O_WRONLY
            node, fh = self.fs.create(
                parent_inode,
                _name(name),
                exclusive=bool(flags & os.O_EXCL),
                truncate=bool(flags & os.O_TRUNC),
                append=bool(flags & os.O_APPEND),
                write_only=write_only,
            )
            info = _file_info(fh, self.fs.keep_pages(node.ino), write_only)
            return info, self.attrs(node)
        except Exception as exc:
            raise self._refused(exc, "create", parent_inode, name) from None

    async def open(self, inode: int, flags: int, ctx: Any) -> Any:
        try:
            write = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
            write_only = (flags & os.O_ACCMODE) == os.O_WRONLY
            if write or flags & os.O_TRUNC:
                self._may_write(ctx, inode, "open for writing")
            else:
                self._may_read(ctx)
            opening = {
                "write": write,
                "truncate": bool(flags & os.O_TRUNC),
                "append": bool(flags & os.O_APPEND),
                "write_only": write_only,
            }
            try:
                fh = self.fs.open(inode, **opening)
            except errors.Unavailable as exc:  # the file not cached, the store away
                fh = await self._waiting_out(exc, self.fs.open, inode, **opening)
            return _file_info(fh, self.fs.keep_pages(inode), write_only)
        except Exception as exc:
            if write or flags & os.O_TRUNC:
                raise self._refused(exc, "open for writing", inode) from None
            if isinstance(exc, FsError) and exc.errno == errno.ENFILE:
                raise self._refused(exc, "open", inode) from None  # no room: worth a line
            raise fuse_error(exc, "open") from None

    async def read(self, fh: int, off: int, size: int) -> bytes:
        try:
            return self.fs.read(fh, off, size)
        except Exception as exc:
            raise fuse_error(exc, "read") from None

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        try:
            return self.fs.write(fh, off, buf)
        except Exception as exc:
            raise self._refused(exc, "write", self.fs.ino_of(fh)) from None

    def _forget_vanished(self) -> None:
        drop_entries(self.fs.take_vanished())

    async def flush(self, fh: int) -> None:
        try:
            await self._change(self.fs.flush, fh)
        except Exception as exc:
            raise self._refused(exc, "save at close", self.fs.ino_of(fh)) from None
        finally:
            self._forget_vanished()

    async def fsync(self, fh: int, datasync: bool) -> None:
        try:
            await self._change(self.fs.fsync, fh)
            await self._flush_to_disk()
        except Exception as exc:
            raise self._refused(exc, "save at fsync", self.fs.ino_of(fh)) from None

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        """A directory's ``fsync``, as programs make one after a rename to make it durable."""
        try:
            await self._flush_to_disk()
        except Exception as exc:
            raise self._refused(exc, "fsync of a directory", fh) from None

    async def _flush_to_disk(self) -> None:
        """Every change committed so far made to survive a power loss (``Backend.flush_to_disk``:
        SQLite's log is synced only at checkpoints), on a worker thread: a disk flush may take
        milliseconds, and a spare task serves the mount's other requests meanwhile."""
        loop.aside()
        await trio.to_thread.run_sync(self.fs.service.flush_to_disk)

    async def release(self, fh: int) -> None:
        ino = self.fs.ino_of(fh)
        try:
            await self._change(self.fs.release, fh)
        except Exception as exc:
            raise self._refused(exc, "save at release", ino) from None
        finally:
            self._forget_vanished()

    # -- refused and informational --------------------------------------------------------------

    def _refuse_link(self, parent: int, name: bytes, what: str) -> None:
        """EPERM: a memory is a regular file; EROFS first where nothing may change. ``what``:
        the call, as the refusal's line names it (a ``mkfifo`` is a ``mknod``)."""
        try:
            self.fs.check_write(parent, what, allowed=True)
            raise FsError(errno.EPERM, "a memory is a regular file: no links, devices or FIFOs")
        except Exception as exc:
            raise self._refused(exc, what, parent, name) from None

    async def link(self, inode: int, new_parent: int, new_name: bytes, ctx: Any) -> Any:
        self._refuse_link(new_parent, new_name, "link")

    async def symlink(self, parent: int, name: bytes, target: bytes, ctx: Any) -> Any:
        self._refuse_link(parent, name, "symlink")

    async def mknod(self, parent: int, name: bytes, mode: int, rdev: int, ctx: Any) -> Any:
        self._refuse_link(parent, name, "mknod")

    async def readlink(self, inode: int, ctx: Any) -> bytes:
        raise pyfuse3.FUSEError(errno.EINVAL)

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: Any) -> None:
        """Refused, as SPEC.md says (``ENOTSUP``), by answering ``ENOSYS``: the kernel then
        refuses every later one ``EOPNOTSUPP`` (the same number) without asking. ``sed -i``
        copies the file's ACL this way, and ``cp -a`` its xattrs: a round trip each."""
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def removexattr(self, inode: int, name: bytes, ctx: Any) -> None:
        """As ``setxattr``."""
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def getxattr(self, inode: int, name: bytes, ctx: Any) -> bytes:
        try:
            self._may_read(ctx)
            node = self.fs.node(inode)
            value = {
                XATTRS[0]: node.memory_id,
                XATTRS[1]: node.version_id,
                XATTRS[2]: node.sha256,
            }.get(name)
            if value is None:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)  # ENODATA: "no such attribute"
            return value.encode()
        except Exception as exc:
            raise fuse_error(exc, "getxattr") from None

    async def listxattr(self, inode: int, ctx: Any) -> list[bytes]:
        try:
            self._may_read(ctx)
            node = self.fs.node(inode)
            return list(XATTRS) if node.memory_id else []
        except Exception as exc:
            raise fuse_error(exc, "listxattr") from None

    async def statfs(self, ctx: Any) -> Any:
        try:
            blocks, free, files, free_files = self.fs.statfs()
            data = pyfuse3.StatvfsData()
            data.f_bsize = data.f_frsize = 4096
            data.f_blocks = blocks
            data.f_bfree = data.f_bavail = free
            data.f_files = files
            data.f_ffree = data.f_favail = free_files
            data.f_namemax = limits.MAX_SEGMENT_BYTES
            return data
        except Exception as exc:
            raise fuse_error(exc, "statfs") from None


# -- the kernel's caches: every invalidation goes through these ---------------------------------


def drop_entries(items: list[Invalidation]) -> None:
    """Tell the kernel to forget these names (pyfuse3 queues it: safe inside a request) and
    these attributes (no pages: nothing to wait for, so safe inside a request too)."""
    for item in items:
        if item.kind == "entry":
            pyfuse3.invalidate_entry_async(item.ino, os.fsencode(item.name), ignore_enoent=True)
        elif item.kind == "attrs":
            try:
                pyfuse3.invalidate_inode(item.ino, attr_only=True)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    log.warning("cannot invalidate the attributes of inode %d: %s", item.ino, exc)


async def drop_caches(items: list[Invalidation]) -> None:
    """Drop kernel caches. Entries go through pyfuse3's own queue; inodes are invalidated from
    a worker thread, never from the trio thread: the kernel may first need an answer to a
    request on that very inode (a writer holding its pages), which only this loop can give."""
    drop_entries(items)
    inodes = [item.ino for item in items if item.kind == "inode"]
    if inodes:
        await trio.to_thread.run_sync(_invalidate_inodes, inodes)


def _file_info(fh: int, keep_cache: bool, write_only: bool) -> Any:
    """An open file's flags for the kernel. The page cache survives across opens: every change
    that bypasses it is invalidated (changes from elsewhere) or flagged for the next open
    (rollbacks, writes that bypassed it). A write-only descriptor bypasses it (``direct_io``):
    it can read nothing back, and the kernel's cached write path asks ``GETXATTR
    security.capability`` before every write (to strip it; a mount has none), one FUSE round
    trip of a save's six, which the direct path does not."""
    return pyfuse3.FileInfo(fh=fh, keep_cache=keep_cache, direct_io=write_only)


def _invalidate_inodes(inodes: list[int]) -> None:
    for ino in inodes:
        try:
            pyfuse3.invalidate_inode(ino)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                log.warning("cannot invalidate inode %d: %s", ino, exc)
