"""Open files and their buffers, and when a buffer becomes a version: the save policy and
the rules for temporary files (see ``core.py`` for the whole story).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Iterator
from typing import NoReturn

from mnemofs import limits
from mnemofs.content import Content, never_text
from mnemofs.errors import MnemofsError, NotFound, PathConflict, PreconditionFailed, WriteWouldWait
from mnemofs.fs.nodes import (
    BACKUP_WINDOW_S,
    BUFFER_BYTES,
    BUFFER_OVERHEAD_BYTES,
    CONTENT_CACHE_BYTES,
    CONTENT_CACHE_ENTRIES,
    FOLD_WINDOW_S,
    READ_AHEAD_BYTES,
    READ_AHEAD_DIRS,
    READ_AHEAD_FILES,
    READ_AHEAD_LOOK,
    READ_AHEAD_RESET_S,
    FsError,
    Handle,
    Invalidation,
    Node,
    OpenFile,
    StoreMount,
    _now_ns,
)
from mnemofs.fs.tree import TreeBase
from mnemofs.models import Memory, MemoryId
from mnemofs.paths import TEMP_NAME

log = logging.getLogger("mnemofs.fs")


class FilesMixin(TreeBase):
    """Open files and their buffers, and when a buffer becomes a version: the save policy and"""

    def _content_of(self, node: Node) -> bytes:
        """A file's saved bytes, from the cache or the store."""
        if node.report is not None:  # .mnemofs/: made now, never cached
            return self.notices.text(node.report)
        cached = self._content.get(node.ino)
        if cached is not None:
            self._content.move_to_end(node.ino)
            return cached
        if node.history_version is not None and node.mount is not None:  # .history
            version = self.service.get_version(node.mount.store_id, node.history_version)
            data = (version.content or "").encode()
            self._cache(node, data)
            return data
        if node.memory_id is None or node.mount is None:
            return b""
        ahead = self._read_ahead(node)
        try:
            if ahead:
                memory = self._read_with(node.mount.store_id, node.memory_id, ahead)
            else:
                memory = self.service.get_memory(node.mount.store_id, node.memory_id)
        except NotFound:
            raise FsError(errno.ENOENT, f"{self.path(node)!r} was deleted meanwhile") from None
        data = (memory.content or "").encode()
        self._cache(node, data)
        return data

    def _read_with(self, store_id: str, memory_id: str, ahead: list[Node]) -> Memory:
        """A memory read with those of ``ahead`` in one go; theirs cached, only as the tree
        shows them (a newer version is the next refresh's), and not counted as read."""
        ids = [memory_id, *(other.memory_id for other in ahead if other.memory_id)]
        found = self.service.get_memories(store_id, ids)
        memory = found.get(MemoryId(memory_id))
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        self.service.note_access(store_id, memory.id)
        for other in ahead:
            got = found.get(MemoryId(other.memory_id or ""))
            if got is not None and got.content_sha256 == other.sha256:
                self._cache(other, (got.content or "").encode())
        return memory

    def _read_ahead(self, node: Node) -> list[Node]:
        """Files to read with ``node``, a miss, where a read is a request (``reads_along``): as
        many as this directory's misses in a row call for (``READ_AHEAD_FILES``), the next
        ones of it in listing order, wrapping round, saved memories not cached nor open."""
        parent = node.parent
        if not self.service.reads_along or parent is None or node.history is not None:
            return []
        if len(parent.children) < 2:
            return []
        now = time.monotonic()
        window, last = self._read_along.pop(parent.ino, (0, 0.0))
        if now - last > READ_AHEAD_RESET_S:
            window = 0
        self._read_along[parent.ino] = (min(max(2 * window, 4), READ_AHEAD_FILES), now)
        if len(self._read_along) > READ_AHEAD_DIRS:
            del self._read_along[next(iter(self._read_along))]  # the least recently missed
        if window == 0:
            return []
        order = parent.listing if parent.listing is not None else list(parent.children.values())
        try:
            at = order.index(node) + 1
        except ValueError:
            at = 0
        ahead: list[Node] = []
        size = 0
        for i in range(min(len(order), READ_AHEAD_LOOK)):
            if size >= READ_AHEAD_BYTES or len(ahead) >= window:
                break
            other = order[(at + i) % len(order)]
            if (
                other.memory_id is None
                or other is node
                or other.file is not None
                or other.ino in self._content
                or other.unlinked
            ):
                continue
            ahead.append(other)
            size += other.size
        return ahead

    def _cache(self, node: Node, data: bytes) -> None:
        cache = self._content
        old = cache.get(node.ino)
        self._content_bytes += len(data) - (0 if old is None else len(old))
        cache[node.ino] = data
        cache.move_to_end(node.ino)
        while len(cache) > CONTENT_CACHE_ENTRIES or self._content_bytes > CONTENT_CACHE_BYTES:
            self._content_bytes -= len(cache.popitem(last=False)[1])

    def _drop_clean_buffer(self, node: Node) -> None:
        """Let go of a buffer that no descriptor has open and that holds nothing unsaved (the
        saved bytes live on in the content cache)."""
        if node.file is not None and node.file.opens == 0 and not node.file.dirty:
            self._let_go(node)

    def _let_go(self, node: Node) -> None:
        assert node.file is not None
        self.buffered -= len(node.file.data) + BUFFER_OVERHEAD_BYTES
        node.file = None

    def _buffer_room(self, more: int) -> bool:
        """Whether ``more`` bytes of open files fit under ``BUFFER_BYTES``. ``buffered`` may
        count more than there is (a buffer that shrank, one that went with its node), never
        less: at the bound the buffers are counted anew."""
        if self.buffered + more <= BUFFER_BYTES:
            return True
        self.buffered = sum(
            len(n.file.data) + BUFFER_OVERHEAD_BYTES for n in self.nodes.values() if n.file
        )
        return self.buffered + more <= BUFFER_BYTES

    @staticmethod
    def _no_room(what: str) -> str:
        held = BUFFER_BYTES // 2**20
        return f"{what}: this mount holds {held} MiB of open files, the most it may"

    def _new_buffer(self, node: Node, data: bytes, what: str) -> OpenFile:
        """Hold ``node``'s bytes open, if the mount has room for them (else ``ENFILE``)."""
        held = len(data) + BUFFER_OVERHEAD_BYTES
        if not self._buffer_room(held):
            raise FsError(errno.ENFILE, self._no_room(f"{what} {self.path(node)!r}"))
        node.file = OpenFile(bytearray(data))
        self.buffered += held
        return node.file

    def _new_handle(
        self, node: Node, writable: bool, append: bool = False, *, direct: bool = False
    ) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = Handle(
            node, writable, append=append, seen=node.version_id, direct=direct
        )
        return fh

    def _saved_by(self, handle: Handle) -> None:
        """After ``handle``'s save (fs/notices.py says whether it was a lost update)."""
        handle.seen = handle.node.version_id

    def _handle(self, fh: int) -> Handle:
        try:
            return self.handles[fh]
        except KeyError:
            raise FsError(errno.EBADF, f"no open file {fh}") from None

    def create(
        self,
        parent_ino: int,
        name: str,
        *,
        exclusive: bool = True,
        truncate: bool = False,
        append: bool = False,
        write_only: bool = False,
    ) -> tuple[Node, int]:
        """open(O_CREAT). The kernel asks only when it believes ``name`` absent, but another
        mount may have made it since: without O_EXCL that is an open of the file it made."""
        parent = self.node(parent_ino)
        mount = self._writable(parent, "create")
        self._check_new_path(parent, name)
        existing = parent.children.get(name)
        if existing is not None:
            if exclusive:
                raise FsError(errno.EEXIST, f"{name!r} exists")
            fh = self.open(
                existing.ino, write=True, truncate=truncate, append=append, write_only=write_only
            )
            existing.lookups += 1
            return existing, fh
        temporary = bool(TEMP_NAME.match(name))
        if not temporary and self._store_full(mount):
            raise FsError(
                errno.ENOSPC,
                f"store {mount.name!r} holds {mount.max_memories} memories, its limit",
            )
        if not self._buffer_room(BUFFER_OVERHEAD_BYTES):
            raise FsError(errno.ENFILE, self._no_room(f"create {name!r}"))
        node = self._new_node(name, parent, False)
        self._entries_changed(parent)
        node.temporary = temporary
        if temporary:
            self.temporaries.add(node)
        node.born = node.temp_since = time.monotonic()
        node.file = OpenFile(bytearray(), dirty=True, opens=1)
        self.buffered += BUFFER_OVERHEAD_BYTES
        node.lookups += 1
        return node, self._new_handle(node, True, append, direct=write_only)

    @staticmethod
    def _store_full(mount: StoreMount) -> bool:
        """By the count last seen: a create that races another mount is refused by the store
        at its save (ENOSPC at close) instead. A store that evicts is never full."""
        return not mount.evicts and mount.count >= mount.max_memories

    def keep_pages(self, ino: int) -> bool:
        """May the kernel keep its page cache for this open (see ``Node.stale_pages``)?"""
        node = self.node(ino)
        keep = not node.stale_pages and node.report is None
        node.stale_pages = False
        return keep

    def open(
        self,
        ino: int,
        *,
        write: bool,
        truncate: bool,
        append: bool = False,
        write_only: bool = False,
    ) -> int:
        """open(). ``write_only``: the kernel keeps no pages for it (``Handle.direct``)."""
        node = self.node(ino)
        if node.is_dir:
            raise FsError(errno.EISDIR, f"{node.name!r} is a directory")
        if write or truncate:
            self._writable(node, "open for writing")
        of = (
            node.file
            if node.file is not None
            else self._new_buffer(node, self._content_of(node), "open")
        )
        if node.memory_id is not None and node.mount is not None:  # for 'evict-lru'
            self.service.note_access(node.mount.store_id, node.memory_id)
        of.opens += 1
        if truncate and of.data:
            of.data.clear()
            of.dirty = True
            node.mtime_ns = node.ctime_ns = _now_ns()
        return self._new_handle(node, write or truncate, append and write, direct=write_only)

    def read(self, fh: int, offset: int, size: int) -> bytes:
        node = self._handle(fh).node
        assert node.file is not None
        return bytes(node.file.data[offset : offset + size])

    def write(self, fh: int, offset: int, data: bytes) -> int:
        handle = self._handle(fh)
        node = handle.node
        if not handle.writable:
            raise FsError(errno.EBADF, "file not open for writing")
        self._writable(node, "write")
        assert node.file is not None
        buf = node.file.data
        if handle.append and offset != len(buf):
            offset = len(buf)
            node.stale_pages = True  # the kernel cached these bytes at its own offset
        end = offset + len(data)
        growth = max(0, end - len(buf))
        cap = limits.MAX_CONTENT_BYTES if node.mount is None else node.mount.max_bytes
        if end > cap:
            own = "" if cap == limits.MAX_CONTENT_BYTES else " (the store's own cap)"
            why = f"{self.path(node)!r} would be {end} bytes, over {cap}{own}"
            self._refuse_write(node, handle, errno.EFBIG, why)
        if not node.temporary:  # (a temporary file may hold anything: it is never saved)
            self._refuse_what_is_never_text(node, handle, offset, data)
        if growth and not self._buffer_room(growth):
            self._refuse_write(node, handle, errno.ENOSPC, self._no_room(repr(self.path(node))))
        self.buffered += growth
        if offset > len(buf):
            buf.extend(b"\0" * (offset - len(buf)))
        buf[offset:end] = data
        if handle.direct:
            node.stale_pages = True
        node.file.dirty = True
        handle.wrote = True
        node.mtime_ns = node.ctime_ns = _now_ns()
        return len(data)

    def _refuse_what_is_never_text(
        self, node: Node, handle: Handle, offset: int, data: bytes
    ) -> None:
        """``EILSEQ`` at the ``write`` that puts a NUL, or a byte UTF-8 never has, into a file
        (the close would refuse the content anyway, and a shell reports a failed write, not a
        failed close); so does one past the end, which would pad the file with NULs. As with
        ``EFBIG``, the file is not saved at close either: the previous version stays."""
        assert node.file is not None
        size = len(node.file.data)
        bad = never_text(data)
        if offset <= size and bad is None:
            return
        if bad is None:
            why = f"a write at {offset}, past its end ({size} bytes), would pad it with NULs"
        else:
            why = f"its byte {offset + bad} would be {data[bad : bad + 1]!r}"
        why = f"{self.path(node)!r}: {why}; content is UTF-8 text without NUL"
        self._refuse_write(node, handle, errno.EILSEQ, why)

    def _refuse_write(self, node: Node, handle: Handle, code: int, why: str) -> NoReturn:
        """Refuse a write, and the file's save at close with it (the previous version stays)."""
        assert node.file is not None
        node.file.failed = code
        node.file.dirty = handle.wrote = True  # this descriptor's close reports it too
        raise FsError(code, why)

    def flush(self, fh: int) -> None:
        """A close(). Saves what this descriptor wrote. One that only created or truncated the
        file saves at release instead: a shell's ``> f`` closes a dup'ed descriptor before
        anything is written, and saving then would make an extra, empty version."""
        handle = self._handle(fh)
        if handle.wrote:
            self.save(handle.node)
            self._saved_by(handle)

    def release(self, fh: int) -> None:
        handle = self.handles.pop(fh, None)
        if handle is None or handle.node.file is None:
            return
        node = handle.node
        of: OpenFile = handle.node.file
        of.opens -= 1
        if of.opens > 0 and not handle.writable:
            return
        try:
            self.save(node)
            self._saved_by(handle)
        except WriteWouldWait:  # nothing done: the release is made again (adapter.py)
            of.opens += 1
            self.handles[fh] = handle
            raise
        finally:
            if of.opens == 0 and node.temporary:
                node.temp_since = time.monotonic()  # left alone from now: see TEMP_GRACE_S
            elif of.opens == 0 and node.file is not None and not node.file.dirty:
                if not node.file.unknown and node.report is None:
                    self._cache(node, bytes(node.file.data))
                self._drop_clean_buffer(node)
            if of.opens == 0 and self._is_twin(node):
                self._drop_twin(node)
            if node.unlinked and of.opens == 0:
                if node.file is not None:
                    self._let_go(node)
                self._forget_node(node)

    def save(self, node: Node, *, undo: bool = True) -> None:
        """Save a dirty buffer as one version (see the module docstring for what may fail).
        A save that fails puts the file back as it was saved (a new file goes), unless
        ``undo`` is False: then the buffer stays as it is, dirty, for the caller to keep."""
        of = node.file
        if of is None or not of.dirty or node.unlinked or node.temporary or node.mount is None:
            return
        mount = node.mount
        path = self.path(node)
        try:
            if not mount.writable:
                raise FsError(errno.EROFS, f"store {mount.name!r} is not writable")
            if of.failed:
                raise FsError(of.failed, f"{path!r}: an earlier write failed; not saved")
            data = bytes(of.data)
            content = Content.from_bytes(data)  # checked and hashed once, down to the SQL
            if node.memory_id is not None and content.sha256 == node.sha256:
                of.dirty = False  # identical content: no version
                return
            taken = None if node.memory_id is not None else self._take_back(mount, path, content)
            if taken is not None:
                memory, created = taken, True  # and the backup: one memory more, as a create
            else:
                memory, created = self.service.save_file(
                    mount.store_id, path, content, memory_id=node.memory_id, actor=self.actor
                )
            if created:
                mount.count += 1
        except (MnemofsError, FsError):
            if undo:
                self._undo_failed_save(node)
            raise
        of.dirty = of.unknown = False
        self._apply_memory(node, memory)
        if memory.path != path:  # renamed elsewhere since the last look: the file follows
            self.vanished += self._follow(mount, node, memory.path) or []
        self._cache(node, data)

    def _take_back(
        self, mount: StoreMount, path: str, content: Content | None, source: Node | None = None
    ) -> Memory | None:
        """A new file saved at ``path`` just after the file there was renamed to a backup of
        its name (``sed -i.bak``, Emacs), or a file saved under another name and renamed to it
        (``source``: ``perl -i.bak``): the memory comes back to ``path`` with the new content,
        and the backup becomes a new memory (``Backend.take_back``), so the path's history
        goes on under its id. None (save or rename as ever) unless the backup is still there,
        as it was renamed, within ``BACKUP_WINDOW_S``."""
        backup = self.backups.pop((mount.store_id, path), None)
        if backup is None or time.monotonic() - backup.at > BACKUP_WINDOW_S:
            return None
        node = backup.node
        dirty = node.file is not None and node.file.dirty
        if node.unlinked or dirty or node.memory_id != backup.memory_id or backup.sha256 is None:
            return None
        if node.sha256 != backup.sha256 or self.path(node) != backup.path:
            return None
        born = source.born if source is not None else 0.0
        try:
            memory, kept = self.service.take_back(
                mount.store_id,
                backup.memory_id,
                path,
                content,
                backup_path=backup.path,
                backup_sha256=backup.sha256,
                source_id=source.memory_id if source is not None else None,
                fold=bool(born) and time.monotonic() - born < FOLD_WINDOW_S,
                actor=self.actor,
            )
        except (PreconditionFailed, NotFound, PathConflict):
            return None  # changed elsewhere meanwhile: as if there were no backup
        except WriteWouldWait:  # nothing done: the backup waits for the call made again
            self.backups[(mount.store_id, path)] = backup
            raise
        mtime = node.mtime_ns  # the backup is the old file: its time stays
        self._apply_memory(node, kept)
        node.mtime_ns = mtime
        return memory

    def _undo_failed_save(self, node: Node) -> None:
        assert node.file is not None
        node.stale_pages = True
        node.file.dirty = False
        node.file.failed = 0
        if node.memory_id is None:
            node.file.data.clear()
            if node.parent is not None:
                self.vanished.append(Invalidation("entry", node.parent.ino, node.name))
            self._detach(node)
            return
        self.vanished.append(Invalidation("attrs", node.ino))  # the kernel has the size it wrote
        saved = self._content.get(node.ino)  # the cache only ever holds saved content
        if saved is None:
            try:
                saved = self._content_of(node)
            except (FsError, MnemofsError):  # deleted meanwhile, or the database is gone
                node.file.unknown = True  # not what is saved: never cache it at release
        node.file.data[:] = saved or b""

    def fsync(self, fh: int) -> None:
        handle = self._handle(fh)
        self.save(handle.node)
        self._saved_by(handle)

    def setattr(
        self,
        ino: int,
        *,
        size: int | None = None,
        mtime_ns: int | None = None,
        atime_ns: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        owner: tuple[int, int] = (0, 0),
        fh: int | None = None,
    ) -> Node:
        node = self.node(ino)
        handle = self.handles.get(fh) if fh is not None else None
        if (uid is not None and uid != owner[0]) or (gid is not None and gid != owner[1]):
            raise FsError(errno.EPERM, "files in a memory store cannot change owner")
        if size is None and mtime_ns is None and atime_ns is None and mode is None:
            return node
        self._writable(node, "setattr")
        if size is not None:
            if node.is_dir:
                raise FsError(errno.EISDIR, f"{node.name!r} is a directory")
            if size > limits.MAX_CONTENT_BYTES:
                raise FsError(errno.EFBIG, f"size {size} is over {limits.MAX_CONTENT_BYTES}")
            opened = node.file is not None
            if node.file is None:
                self._new_buffer(node, self._content_of(node), "truncate")
            assert node.file is not None  # (mypy: the call above set it)
            buf = node.file.data
            if size > len(buf):
                if not opened:
                    self._drop_clean_buffer(node)
                raise FsError(
                    errno.EILSEQ,
                    f"growing {node.name!r} to {size} bytes would pad it with NUL bytes, "
                    "which a memory cannot hold (content is text)",
                )
            if size != len(buf):
                del buf[size:]
                node.file.dirty = True
                if handle is not None:
                    handle.wrote = True  # ftruncate: saved at this descriptor's close
            node.mtime_ns = node.ctime_ns = _now_ns()
            if not opened:  # truncate(2) on a path: that is a save of its own
                try:
                    self.save(node)
                except WriteWouldWait:  # nothing saved: the buffer made here goes again
                    node.file.dirty = False
                    raise
                finally:
                    self._drop_clean_buffer(node)
        if atime_ns is not None:
            node.atime_ns = atime_ns  # kept while mounted (not stored: see docs/decisions.md)
            node.ctime_ns = _now_ns()
        if mtime_ns is not None:
            if node.file is not None and node.file.dirty:
                self.save(node)  # touch, cp -p, tar: setting times ends a save
            # After the save, which stamps its own time: cp -a and cp -p set the source's
            # times on the descriptor they wrote, before its close.
            node.mtime_ns = mtime_ns
            node.ctime_ns = _now_ns()
        return node

    def save_all(self, under: Node | None = None) -> list[tuple[str, Exception]]:
        """Save every dirty file (under ``under``); temporary files become memories."""
        failures: list[tuple[str, Exception]] = []
        for node in list(self.nodes.values()):
            if node.is_dir or node.file is None or not node.file.dirty or node.unlinked:
                continue
            if under is not None and not self._is_under(node, under):
                continue
            node.temporary = False
            try:
                self.save(node)
            except (MnemofsError, FsError) as exc:
                failures.append((self.path(node), exc))
        return failures

    @staticmethod
    def _is_under(node: Node, ancestor: Node) -> bool:
        walk: Node | None = node
        while walk is not None:
            if walk is ancestor:
                return True
            walk = walk.parent
        return False

    def note_refusal(
        self, what: str, where: str, code: int, reason: str, hint: str | None = None
    ) -> None:
        """A change refused with errno ``code``; ``.mnemofs/refusals`` says it (notices.py)."""

    def statfs(self) -> tuple[int, int, int, int]:
        """(blocks, free blocks, files, free files) in 4 KiB blocks, from the store limits."""
        per_store_blocks = limits.MAX_MEMORIES_PER_STORE * limits.MAX_CONTENT_BYTES // 4096
        blocks = files = free_files = used_bytes = 0
        for mount in self.mounts:
            sizes = [n.current_size for n in self._files(mount.root)]
            blocks += per_store_blocks
            files += limits.MAX_MEMORIES_PER_STORE
            free_files += max(0, limits.MAX_MEMORIES_PER_STORE - len(sizes))
            used_bytes += sum(sizes)
        return blocks, max(0, blocks - used_bytes // 4096), files, free_files

    def _files(self, node: Node | None) -> Iterator[Node]:
        if node is None:
            return
        for child in node.children.values():
            if child.is_dir:
                yield from self._files(child)
            elif not child.temporary:
                yield child
