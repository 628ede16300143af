"""The filesystem in domain terms: the inode tree of a mounted session, open-file buffers, saves.

No pyfuse3 here (``adapter.py`` translates): every method is a plain call that returns nodes
and bytes or raises ``FsError`` (a POSIX refusal with its errno) or a store error (mapped by the
adapter). The store owns every rule about memories; this module decides *when* to call it.

Concurrency contract: ``MemoryFs`` is used from the trio thread only, one request at a time
between awaits; no method awaits, so each runs atomically with respect to the others. Store
calls block that thread (a local SQLite commit is ~100 µs, cheaper than a thread hop).

How files become versions
- A file's bytes live in one ``OpenFile`` buffer shared by every descriptor on it, so reads
  through any descriptor see writes through any other.
- A dirty buffer is saved at flush (every close), fsync and release, and at unmount: one
  version per save, none if the content is unchanged. A failed save returns its errno from that
  call and puts the buffer back to the last saved content; a new file whose first save fails
  disappears.
- Temporary files (names like ``sedAbC123``, ``tmpk2j4_x9a``, ``x.tmp``, ``.#x``, ``x~``; see
  ``TEMP_NAME``) are kept in memory: renamed over an existing file they become one version of
  that file, unlinked they leave nothing, and left alone they are saved as ordinary memories
  after ``TEMP_GRACE_S`` (or at unmount). They never count toward the store's limit.
- A file created through this mount and renamed over another within ``FOLD_WINDOW_S`` is
  folded: the target takes its content as one version and the new file's own history is
  dropped, so ``write tmp; rename tmp target`` leaves exactly one version whatever the name.
"""

from __future__ import annotations

import errno
import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from mnemofs import limits
from mnemofs.errors import MnemofsError, NotFound
from mnemofs.models import Change, Memory, Session, StoreId
from mnemofs.paths import TEMP_NAME, validate_path
from mnemofs.store import MemoryService, decode_content

ROOT_INO = 1
TEMP_GRACE_S = 2.0
FOLD_WINDOW_S = 300.0
CONTENT_CACHE_ENTRIES = 4096


class FsError(Exception):
    """A POSIX refusal the store has no word for (ENOTDIR, EXDEV, EROFS...)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.errno = code
        self.message = message


@dataclass(eq=False)
class StoreMount:
    """One attached store: where it is in the tree and what the mount may do with it."""

    store_id: StoreId
    slug: str
    name: str
    access: Literal["read_write", "read_only"]
    archived: bool
    evicts: bool = False  # 'evict-lru': a create in a full store evicts instead of ENOSPC
    revision: int = -1
    last_seq: int = 0
    count: int = 0  # memories in the store, as last seen (the store itself has the last word)
    root: Node | None = None

    @property
    def writable(self) -> bool:
        return self.access == "read_write" and not self.archived


@dataclass(eq=False)
class OpenFile:
    """The bytes of a file while any descriptor has it open (or it is unsaved)."""

    data: bytearray
    dirty: bool = False
    opens: int = 0
    failed: int = 0  # an errno a write hit (EFBIG): the next save refuses and rolls back
    unknown: bool = False  # a failed save could not reload the saved bytes: do not cache these


@dataclass(eq=False)
class Node:
    ino: int
    name: str
    parent: Node | None
    is_dir: bool
    mount: StoreMount | None  # None for the mount root
    mtime_ns: int
    ctime_ns: int
    children: dict[str, Node] = field(default_factory=dict)
    memory_id: str | None = None
    version_id: str | None = None
    sha256: str | None = None
    size: int = 0
    lookups: int = 0
    file: OpenFile | None = None
    temporary: bool = False  # a temp-named file kept in memory (see the module docstring)
    temp_since: float = 0.0
    born: float = 0.0  # when this mount created it (0: it came from the store)
    unlinked: bool = False
    # The kernel's page cache for this file may hold bytes that are not the saved content (a
    # save failed and was rolled back, or it changed elsewhere): the next open drops it.
    stale_pages: bool = False

    @property
    def current_size(self) -> int:
        return len(self.file.data) if self.file is not None else self.size


@dataclass(eq=False)
class Handle:
    """One open file description (shared by dup'ed descriptors, so one FLUSH per close)."""

    node: Node
    writable: bool
    wrote: bool = False
    # O_APPEND: every write lands at the end of the buffer as it is now. The kernel's offset is
    # its own idea of the size, which another descriptor's O_TRUNC open may have made stale
    # before this write reached us (an append there would leave a run of NUL bytes).
    append: bool = False


@dataclass(frozen=True)
class Invalidation:
    """A kernel cache entry to drop after the store changed under the mount."""

    kind: Literal["inode", "entry"]
    ino: int
    name: str = ""


def _now_ns() -> int:
    return time.time_ns()


def _ns(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1e9)


class MemoryFs:
    """The mounted session: root directory, one directory per attached store."""

    def __init__(self, service: MemoryService, session: Session, *, actor: str) -> None:
        self.service = service
        self.session = session
        self.actor = actor
        self.nodes: dict[int, Node] = {}
        self.handles: dict[int, Handle] = {}
        self.by_memory: dict[str, Node] = {}  # memory id -> its node, for changes from elsewhere
        # Names that vanished without the kernel's doing (a new file whose first save failed):
        # the adapter tells the kernel to forget them.
        self.vanished: list[Invalidation] = []
        self._next_ino = ROOT_INO + 1
        self._next_fh = 1
        self._content: OrderedDict[int, bytes] = OrderedDict()
        now = _now_ns()
        self.root = Node(ROOT_INO, "", None, True, None, now, now)
        self.nodes[ROOT_INO] = self.root
        self.mounts: list[StoreMount] = []
        for attachment in session.resources:
            slug = attachment.mount_path.rsplit("/", 1)[-1]
            mount = StoreMount(
                attachment.memory_store_id, slug, attachment.name, attachment.access, False,
                evicts=attachment.on_full == "evict-lru",
            )  # fmt: skip
            self.mounts.append(mount)
            self._load(mount)

    # -- the tree -------------------------------------------------------------------------------

    def _new_node(self, name: str, parent: Node, is_dir: bool, mtime_ns: int | None = None) -> Node:
        now = _now_ns() if mtime_ns is None else mtime_ns
        node = Node(self._next_ino, name, parent, is_dir, parent.mount, now, now)
        self._next_ino += 1
        self.nodes[node.ino] = node
        parent.children[name] = node
        return node

    def _load(self, mount: StoreMount) -> None:
        """Build (or rebuild) a store's subtree from a snapshot of the store."""
        snap = self.service.snapshot(mount.store_id)
        mount.revision = snap.revision
        mount.last_seq = snap.last_seq
        mount.archived = snap.store.archived_at is not None
        mount.count = snap.store.memory_count
        now = _now_ns()
        root = Node(self._next_ino, mount.slug, self.root, True, mount, now, now)
        self._next_ino += 1
        self.nodes[root.ino] = root
        self.root.children[mount.slug] = root
        mount.root = root
        for prefix in snap.directories:
            self._ensure_dir(mount, prefix.strip("/"))
        for memory in snap.memories:
            self._place(mount, memory)

    def _ensure_dir(self, mount: StoreMount, rel: str) -> Node:
        assert mount.root is not None
        node = mount.root
        for part in [p for p in rel.split("/") if p]:
            child = node.children.get(part)
            if child is None:
                child = self._new_node(part, node, True)
            node = child
        return node

    def _place(self, mount: StoreMount, memory: Memory) -> Node:
        parent_rel, _, name = memory.path[1:].rpartition("/")
        parent = self._ensure_dir(mount, parent_rel)
        node = self._new_node(name, parent, False, _ns(memory.updated_at))
        self._apply_memory(node, memory)
        return node

    def _apply_memory(self, node: Node, memory: Memory) -> None:
        if node.memory_id is not None and node.memory_id != memory.id:
            self.by_memory.pop(node.memory_id, None)
        self.by_memory[memory.id] = node
        node.memory_id = memory.id
        node.version_id = memory.version_id
        node.sha256 = memory.content_sha256
        node.size = memory.size_bytes
        node.temporary = False
        mtime = _ns(memory.updated_at)
        node.mtime_ns = node.ctime_ns = mtime

    def path(self, node: Node) -> str:
        """The store path of a node inside a store (``/a/b.md``)."""
        parts: list[str] = []
        while node.parent is not None and node.parent is not self.root:
            parts.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(parts))

    def node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise FsError(errno.ENOENT, f"no inode {ino}") from None

    def child(self, parent: Node, name: str) -> Node:
        if not parent.is_dir:
            raise FsError(errno.ENOTDIR, f"{parent.name!r} is not a directory")
        try:
            return parent.children[name]
        except KeyError:
            raise FsError(errno.ENOENT, f"no entry {name!r}") from None

    def _forget_node(self, node: Node) -> None:
        """Drop a node that left the tree once the kernel and open files let go of it."""
        if node.lookups <= 0 and node.file is None and node.ino != ROOT_INO:
            self.nodes.pop(node.ino, None)
            self._content.pop(node.ino, None)

    def _detach(self, node: Node) -> None:
        if node.parent is not None and node.parent.children.get(node.name) is node:
            del node.parent.children[node.name]
        if node.memory_id is not None and self.by_memory.get(node.memory_id) is node:
            del self.by_memory[node.memory_id]
        node.unlinked = True
        self._forget_node(node)

    def forget(self, ino: int, count: int) -> None:
        node = self.nodes.get(ino)
        if node is None:
            return
        node.lookups -= count
        if node.unlinked:
            self._forget_node(node)

    def lookup(self, parent_ino: int, name: str) -> Node:
        node = self.child(self.node(parent_ino), name)
        node.lookups += 1
        return node

    def readdir(self, ino: int, after: int) -> Iterator[tuple[str, Node]]:
        """Entries in inode order past ``after``: offsets stay valid while entries change."""
        parent = self.node(ino)
        if not parent.is_dir:
            raise FsError(errno.ENOTDIR, f"{parent.name!r} is not a directory")
        for node in sorted(parent.children.values(), key=lambda n: n.ino):
            if node.ino > after:
                yield node.name, node

    # -- permissions ----------------------------------------------------------------------------

    def check_write(self, ino: int, what: str, *, allowed: bool) -> None:
        """May the caller change ``ino`` (or entries in it)? A read-only store or the root says
        EROFS to everyone, first, as a read-only filesystem does; then a caller the mount's
        access rules do not allow (``allowed``, see ``fs/access.py``) gets EACCES."""
        self._writable(self.node(ino), what)
        if not allowed:
            raise FsError(errno.EACCES, f"{what}: this user may not use the mount")

    def _writable(self, node: Node, what: str) -> StoreMount:
        mount = node.mount
        if mount is None:
            raise FsError(errno.EROFS, f"{what}: the mount root is read-only")
        if not mount.writable:
            state = "archived" if mount.archived else "read_only"
            raise FsError(errno.EROFS, f"{what}: store {mount.name!r} is {state}")
        return mount

    @staticmethod
    def _check_name(name: str) -> None:
        if len(name.encode()) > limits.MAX_SEGMENT_BYTES:
            raise FsError(errno.ENAMETOOLONG, f"name {name[:40]!r}... is too long")

    def _check_new_path(self, parent: Node, name: str) -> str:
        self._check_name(name)
        path = (self.path(parent).rstrip("/") + "/" + name) if parent.mount else "/" + name
        validate_path(path)
        return path

    # -- files ----------------------------------------------------------------------------------

    def _content_of(self, node: Node) -> bytes:
        """A file's saved bytes, from the cache or the store."""
        cached = self._content.get(node.ino)
        if cached is not None:
            self._content.move_to_end(node.ino)
            return cached
        if node.memory_id is None or node.mount is None:
            return b""
        try:
            memory = self.service.get_memory(node.mount.store_id, node.memory_id)
        except NotFound:
            raise FsError(errno.ENOENT, f"{self.path(node)!r} was deleted meanwhile") from None
        data = (memory.content or "").encode()
        self._cache(node, data)
        return data

    def _cache(self, node: Node, data: bytes) -> None:
        self._content[node.ino] = data
        self._content.move_to_end(node.ino)
        while len(self._content) > CONTENT_CACHE_ENTRIES:
            self._content.popitem(last=False)

    def _new_handle(self, node: Node, writable: bool, append: bool = False) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = Handle(node, writable, append=append)
        return fh

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
            fh = self.open(existing.ino, write=True, truncate=truncate, append=append)
            existing.lookups += 1
            return existing, fh
        temporary = bool(TEMP_NAME.match(name))
        if not temporary and self._store_full(mount):
            raise FsError(
                errno.ENOSPC,
                f"store {mount.name!r} holds {limits.MAX_MEMORIES_PER_STORE} memories, the limit",
            )
        node = self._new_node(name, parent, False)
        node.temporary = temporary
        node.born = node.temp_since = time.monotonic()
        node.file = OpenFile(bytearray(), dirty=True, opens=1)
        node.lookups += 1
        return node, self._new_handle(node, True, append)

    @staticmethod
    def _store_full(mount: StoreMount) -> bool:
        """By the count last seen: a create that races another mount is refused by the store
        at its save (ENOSPC at close) instead. A store that evicts is never full."""
        return not mount.evicts and mount.count >= limits.MAX_MEMORIES_PER_STORE

    def keep_pages(self, ino: int) -> bool:
        """May the kernel keep its page cache for this open (see ``Node.stale_pages``)?"""
        node = self.node(ino)
        keep = not node.stale_pages
        node.stale_pages = False
        return keep

    def open(self, ino: int, *, write: bool, truncate: bool, append: bool = False) -> int:
        node = self.node(ino)
        if node.is_dir:
            raise FsError(errno.EISDIR, f"{node.name!r} is a directory")
        if write or truncate:
            self._writable(node, "open for writing")
        if node.file is None:
            node.file = OpenFile(bytearray(self._content_of(node)))
        if node.memory_id is not None and node.mount is not None:  # for 'evict-lru'
            self.service.note_access(node.mount.store_id, node.memory_id)
        node.file.opens += 1
        if truncate and node.file.data:
            node.file.data.clear()
            node.file.dirty = True
            node.mtime_ns = node.ctime_ns = _now_ns()
        return self._new_handle(node, write or truncate, append and write)

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
        if end > limits.MAX_CONTENT_BYTES:
            node.file.failed = errno.EFBIG
            node.file.dirty = handle.wrote = True  # this descriptor's close reports it too
            raise FsError(
                errno.EFBIG,
                f"{self.path(node)!r} would be {end} bytes, over {limits.MAX_CONTENT_BYTES}",
            )
        if offset > len(buf):
            buf.extend(b"\0" * (offset - len(buf)))
        buf[offset:end] = data
        node.file.dirty = True
        handle.wrote = True
        node.mtime_ns = node.ctime_ns = _now_ns()
        return len(data)

    def flush(self, fh: int) -> None:
        """A close(). Saves what this descriptor wrote. One that only created or truncated the
        file saves at release instead: a shell's ``> f`` closes a dup'ed descriptor before
        anything is written, and saving then would make an extra, empty version."""
        handle = self._handle(fh)
        if handle.wrote:
            self.save(handle.node)

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
        finally:
            if of.opens == 0 and node.temporary:
                node.temp_since = time.monotonic()  # left alone from now: see TEMP_GRACE_S
            elif of.opens == 0 and node.file is not None and not node.file.dirty:
                if not node.file.unknown:
                    self._cache(node, bytes(node.file.data))
                node.file = None
            if node.unlinked and of.opens == 0:
                node.file = None
                self._forget_node(node)

    def save(self, node: Node) -> None:
        """Save a dirty buffer as one version (see the module docstring for what may fail)."""
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
            if node.memory_id is not None and hashlib.sha256(data).hexdigest() == node.sha256:
                of.dirty = False  # identical content: no version
                return
            memory, created = self.service.save_file(
                mount.store_id, path, decode_content(data), memory_id=node.memory_id,
                actor=self.actor,
            )  # fmt: skip
            if created:
                mount.count += 1
        except (MnemofsError, FsError):
            self._undo_failed_save(node)
            raise
        of.dirty = of.unknown = False
        self._apply_memory(node, memory)
        self._cache(node, bytes(of.data))

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
        saved = self._content.get(node.ino)  # the cache only ever holds saved content
        if saved is None:
            try:
                saved = self._content_of(node)
            except (FsError, MnemofsError):  # deleted meanwhile, or the database is gone
                node.file.unknown = True  # not what is saved: never cache it at release
        node.file.data[:] = saved or b""

    def fsync(self, fh: int) -> None:
        self.save(self._handle(fh).node)

    def setattr(
        self,
        ino: int,
        *,
        size: int | None = None,
        mtime_ns: int | None = None,
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
        if size is None and mtime_ns is None and mode is None:
            return node
        self._writable(node, "setattr")
        if size is not None:
            if node.is_dir:
                raise FsError(errno.EISDIR, f"{node.name!r} is a directory")
            if size > limits.MAX_CONTENT_BYTES:
                raise FsError(errno.EFBIG, f"size {size} is over {limits.MAX_CONTENT_BYTES}")
            opened = node.file is not None
            if node.file is None:
                node.file = OpenFile(bytearray(self._content_of(node)))
            buf = node.file.data
            if size != len(buf):
                if size < len(buf):
                    del buf[size:]
                else:
                    buf.extend(b"\0" * (size - len(buf)))
                node.file.dirty = True
                if handle is not None:
                    handle.wrote = True  # ftruncate: saved at this descriptor's close
            node.mtime_ns = node.ctime_ns = _now_ns()
            if not opened:  # truncate(2) on a path: that is a save of its own
                try:
                    self.save(node)
                finally:
                    if node.file is not None and not node.file.dirty:
                        node.file = None
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
            node.ctime_ns = _now_ns()
            if node.file is not None and node.file.dirty:
                self.save(node)  # touch, cp -p, tar: setting times ends a save
        return node

    # -- directories ----------------------------------------------------------------------------

    def mkdir(self, parent_ino: int, name: str) -> Node:
        parent = self.node(parent_ino)
        mount = self._writable(parent, "mkdir")
        path = self._check_new_path(parent, name)
        if name in parent.children:
            raise FsError(errno.EEXIST, f"{name!r} exists")
        self.service.make_directory(mount.store_id, path)
        node = self._new_node(name, parent, True)
        node.lookups += 1
        return node

    def rmdir(self, parent_ino: int, name: str) -> None:
        parent = self.node(parent_ino)
        node = self.child(parent, name)
        mount = self._writable(parent, "remove")
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
        if node.children:
            raise FsError(errno.ENOTEMPTY, f"{name!r} is not empty")
        with suppress(NotFound):  # only this mount still showed it
            self.service.remove_directory(mount.store_id, self.path(node))
        self._detach(node)

    def unlink(self, parent_ino: int, name: str) -> None:
        parent = self.node(parent_ino)
        node = self.child(parent, name)
        mount = self._writable(parent, "remove")
        if node.is_dir:
            raise FsError(errno.EISDIR, f"{name!r} is a directory")
        if node.memory_id is not None:
            with suppress(NotFound):  # deleted elsewhere meanwhile
                self.service.delete_memory(
                    mount.store_id, node.memory_id, actor=self.actor, keep_directory=True
                )
                mount.count -= 1
        self._detach(node)

    def rename(self, old_parent: int, old_name: str, new_parent: int, new_name: str,
               *, noreplace: bool = False) -> None:  # fmt: skip
        src_dir, dst_dir = self.node(old_parent), self.node(new_parent)
        node = self.child(src_dir, old_name)
        mount = self._writable(src_dir, "rename")
        dst_mount = self._writable(dst_dir, "rename into")
        if dst_dir is self.root:
            raise FsError(errno.EROFS, "rename: the mount root is read-only")
        if dst_mount is not mount:
            raise FsError(errno.EXDEV, "rename across memory stores")
        new_path = self._check_new_path(dst_dir, new_name)
        target = dst_dir.children.get(new_name)
        if target is node:
            return
        if target is not None and noreplace:
            raise FsError(errno.EEXIST, f"{new_name!r} exists")
        if node.is_dir:
            self._rename_dir(mount, node, dst_dir, new_name, new_path, target)
        elif target is not None:
            if target.is_dir:
                raise FsError(errno.EISDIR, f"{new_name!r} is a directory")
            self._rename_over(mount, node, target)
        else:
            self._rename_file(mount, node, dst_dir, new_name, new_path)

    def _move(self, node: Node, dst_dir: Node, new_name: str) -> None:
        assert node.parent is not None
        del node.parent.children[node.name]
        node.parent = dst_dir
        node.name = new_name
        dst_dir.children[new_name] = node
        node.ctime_ns = _now_ns()

    def _rename_file(
        self, mount: StoreMount, node: Node, dst_dir: Node, new_name: str, new_path: str
    ) -> None:
        if node.memory_id is not None:
            memory = self.service.update_memory(
                mount.store_id, node.memory_id, path=new_path, actor=self.actor,
                keep_directory=True,
            )  # fmt: skip
            self._apply_memory(node, memory)
        self._move(node, dst_dir, new_name)
        if node.temporary and not TEMP_NAME.match(new_name):
            node.temporary = False  # a real name now: save it like any file
            if node.file is not None and node.file.opens == 0:
                try:
                    self.save(node)
                finally:
                    if node.file is not None and not node.file.dirty:
                        node.file = None

    def _rename_over(self, mount: StoreMount, node: Node, target: Node) -> None:
        """``rename(node, target)``: the target keeps its id and takes node's content."""
        if target.memory_id is None:  # the target was never saved: plain replace
            self._detach(target)
            self._rename_file(mount, node, target.parent or self.root, target.name,
                              self.path(target))  # fmt: skip
            return
        self.save(node)  # an open, dirty source is saved first (temporary ones are not)
        data = bytes(node.file.data) if node.file is not None else self._content_of(node)
        if node.memory_id is not None:
            fold = bool(node.born) and time.monotonic() - node.born < FOLD_WINDOW_S
            memory = self.service.rename_over(
                mount.store_id, node.memory_id, target.memory_id, actor=self.actor, fold=fold
            )
            mount.count -= 1
        else:
            memory = self.service.update_memory(
                mount.store_id, target.memory_id, content=decode_content(data), actor=self.actor
            )
        # As on any filesystem, the source's inode now lives under the target's name (that is
        # what the kernel's caches already say); it carries the target's memory from here on.
        dst_dir = target.parent or self.root
        self._detach(target)
        self._move(node, dst_dir, target.name)
        self._apply_memory(node, memory)
        node.born = 0.0  # an old memory now: never folded into another
        if node.file is not None:
            node.file.dirty = False
            if node.file.opens == 0:
                node.file = None
        self._cache(node, data)

    def _rename_dir(
        self,
        mount: StoreMount,
        node: Node,
        dst_dir: Node,
        new_name: str,
        new_path: str,
        target: Node | None,
    ) -> None:
        if node is mount.root:
            raise FsError(errno.EROFS, "a store's directory cannot be renamed")
        walk: Node | None = dst_dir
        while walk is not None:
            if walk is node:
                raise FsError(errno.EINVAL, "cannot move a directory into itself")
            walk = walk.parent
        if target is not None:
            if not target.is_dir:
                raise FsError(errno.ENOTDIR, f"{new_name!r} is not a directory")
            if target.children:
                raise FsError(errno.ENOTEMPTY, f"{new_name!r} is not empty")
        self.save_all(under=node)
        with suppress(NotFound):  # nothing under it was saved yet
            self.service.move_directory(mount.store_id, self.path(node), new_path, actor=self.actor)
        if target is not None:
            self._detach(target)
        self._move(node, dst_dir, new_name)

    # -- whole-mount operations -----------------------------------------------------------------

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

    def promote_temporaries(self, now: float | None = None) -> None:
        """Save temp-named files left alone for ``TEMP_GRACE_S`` as ordinary memories."""
        now = time.monotonic() if now is None else now
        if self.service.unavailable is not None:
            return  # a failed save would drop them; they wait for the database
        for node in list(self.nodes.values()):
            if not node.temporary or node.unlinked or node.file is None or node.file.opens:
                continue
            if now - node.temp_since < TEMP_GRACE_S:
                continue
            if node.mount is not None and self._store_full(node.mount):
                continue  # still not counted; tried again later
            node.temporary = False
            try:
                self.save(node)
            except (MnemofsError, FsError):
                continue
            if node.file is not None and not node.file.dirty:
                node.file = None

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

    # -- changes made elsewhere -----------------------------------------------------------------

    def refresh(self) -> list[Invalidation]:
        """Bring the tree up to date with the store; say which kernel caches to drop."""
        states = self.service.store_states([m.store_id for m in self.mounts])
        out: list[Invalidation] = []
        for mount in self.mounts:
            state = states.get(mount.store_id)
            if state is None or state.revision == mount.revision:
                continue
            mount.revision = state.revision
            mount.archived = state.archived_at is not None
            mount.count = state.memory_count
            if mount.root is not None:
                out.append(Invalidation("inode", mount.root.ino))
            latest: dict[str, Change] = {}  # the newest change of each memory, in seq order
            for change in self.service.changes(mount.store_id, mount.last_seq, limit=100_000):
                mount.last_seq = change.seq
                latest.pop(change.version.memory_id, None)
                latest[change.version.memory_id] = change
            for memory_id, change in latest.items():
                if not self._knows(change):
                    out += self._apply_change(mount, memory_id)
            out += self._sync_directories(mount)
        return out

    def _knows(self, change: Change) -> bool:
        """Is ``change`` one of ours that the tree already shows? (A save whose commit outcome
        was unknown, or another mount of this same session, makes ours that it does not.)"""
        version = change.version
        if version.actor != self.actor:
            return False
        node = self.by_memory.get(version.memory_id)
        if node is None:
            return version.operation == "deleted"
        return node.version_id == version.id

    def _apply_change(self, mount: StoreMount, memory_id: str) -> list[Invalidation]:
        out: list[Invalidation] = []
        node = self.by_memory.get(memory_id)
        try:
            memory: Memory | None = self.service.get_memory(
                mount.store_id, memory_id, count_access=False
            )
        except NotFound:
            memory = None
        if node is not None and node.file is not None and node.file.dirty:
            return out  # our unsaved edit wins at its save (last commit is the head)
        if node is not None and (memory is None or self.path(node) != memory.path):
            assert node.parent is not None
            out.append(Invalidation("entry", node.parent.ino, node.name))
            self._detach(node)
            if memory is not None:
                node = None
        if memory is None:
            return out
        if node is None:
            existing = self._lookup_path(mount, memory.path)
            if (
                existing is not None
                and not existing.is_dir
                and existing.file is not None
                and (existing.memory_id is None or existing.file.dirty)
            ):
                # Our own file at that path is open or unsaved: it becomes that memory, and our
                # content wins at its save (the last commit is the head; nothing is lost).
                self._apply_memory(existing, memory)
                return out
            if existing is not None:
                out.append(Invalidation("entry", existing.parent.ino, existing.name))  # type: ignore[union-attr]
                self._detach(existing)
            node = self._place(mount, memory)
            assert node.parent is not None
            out.append(Invalidation("entry", node.parent.ino, node.name))
        else:
            self._apply_memory(node, memory)
        content = (memory.content or "").encode()
        node.stale_pages = True
        self._cache(node, content)
        if node.file is not None:
            node.file.data[:] = content
            node.file.unknown = False
        out.append(Invalidation("inode", node.ino))
        return out

    def _lookup_path(self, mount: StoreMount, path: str) -> Node | None:
        node = mount.root
        for part in path.strip("/").split("/"):
            if node is None:
                return None
            node = node.children.get(part)
        return node

    def _sync_directories(self, mount: StoreMount) -> list[Invalidation]:
        """Show directories made elsewhere (mkdir through another mount). Directories removed
        elsewhere stay until this mount's rmdir or remount (they are empty by then)."""
        out: list[Invalidation] = []
        for prefix in self.service.explicit_directories(mount.store_id):
            if self._lookup_path(mount, prefix) is None:
                node = self._ensure_dir(mount, prefix.strip("/"))
                assert node.parent is not None
                out.append(Invalidation("entry", node.parent.ino, node.name))
        return out
