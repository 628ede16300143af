"""The inode tree of a mounted session: nodes by inode and by memory, lookups, permissions."""

from __future__ import annotations

import bisect
import errno
import operator
from collections import OrderedDict
from collections.abc import Iterator

from mnemofs import limits
from mnemofs.backend import Backend
from mnemofs.fs.nodes import (
    ROOT_INO,
    Backup,
    FsError,
    Handle,
    Invalidation,
    Node,
    NoticeLog,
    StoreMount,
    _now_ns,
    _ns,
    drop_child,
    set_child,
)
from mnemofs.models import Memory, Session
from mnemofs.paths import validate_path

_INO = operator.attrgetter("ino")


class TreeBase:
    """The inode tree of a mounted session: nodes by inode and by memory, lookups, permissions."""

    def __init__(self, service: Backend, session: Session, *, actor: str) -> None:
        self.service = service
        self.session = session
        self.actor = actor
        self.nodes: dict[int, Node] = {}
        self.handles: dict[int, Handle] = {}
        # Nodes made with a temporary name (fs/files.py): the ones ``promote_temporaries``
        # looks at, rather than every node of a full store four times a second.
        self.temporaries: set[Node] = set()
        self.by_memory: dict[str, Node] = {}  # memory id -> its node, for changes from elsewhere
        # (store id, path) -> the saved file just renamed from it to a backup of its name
        # (fs/files.py ``_take_back``); entries last BACKUP_WINDOW_S.
        self.backups: dict[tuple[str, str], Backup] = {}
        # Names that vanished without the kernel's doing (a new file whose first save failed):
        # the adapter tells the kernel to forget them.
        self.vanished: list[Invalidation] = []
        # Directories whose entries changed since the last refresh (their cached attributes
        # go then: a change from elsewhere moves times and link counts the kernel keeps).
        self.dirs_changed: set[Node] = set()
        # The same, since the last refresh looked at them for a directory the store no longer
        # has (fs/refresh.py ``_sync_directories``): emptied here or there, and not kept.
        self.dirs_touched: set[Node] = set()
        # The tree shows everything in the stores up to the last look (fs/refresh.py): not
        # while a refresh is under way or after one failed, nor after a change of ours whose
        # outcome is unknown (the database went away as it committed).
        self.in_step = True
        self._history_roots: dict[str, Node] = {}  # store id -> its .history (fs/history.py)
        self.notices = NoticeLog()  # .mnemofs/ (fs/notices.py)
        self._notices: Node | None = None
        self._next_ino = ROOT_INO + 1
        self._next_fh = 1
        self._content: OrderedDict[int, bytes] = OrderedDict()
        self._content_bytes = 0  # the sum of the cached contents' lengths
        # Directory inode -> (how many files its next miss reads along, when its last was):
        # fs/files.py ``_read_ahead``.
        self._read_along: dict[int, tuple[int, float]] = {}
        # At least the bytes of the files held open (fs/files.py ``_buffer_room``): added to
        # as buffers are made and grow, taken from as they go, counted anew at the bound.
        self.buffered = 0
        now = _now_ns()
        self.root = Node(ROOT_INO, "", None, True, None, now, now)
        self.nodes[ROOT_INO] = self.root
        self.mounts: list[StoreMount] = []
        for attachment in session.resources:
            slug = attachment.mount_path.rsplit("/", 1)[-1]
            mount = StoreMount(
                attachment.memory_store_id,
                slug,
                attachment.name,
                attachment.access,
                False,
                evicts=attachment.on_full == "evict-lru",
            )
            self.mounts.append(mount)
            self._load(mount)

    def _new_node(self, name: str, parent: Node, is_dir: bool, mtime_ns: int | None = None) -> Node:
        now = _now_ns() if mtime_ns is None else mtime_ns
        node = Node(self._next_ino, name, parent, is_dir, parent.mount, now, now)
        self._next_ino += 1
        self.nodes[node.ino] = node
        set_child(parent, name, node)
        if is_dir:  # looked at once: the store may not keep it (fs/refresh.py)
            self.dirs_touched.add(node)
        return node

    def _entries_changed(self, *dirs: Node) -> None:
        """An entry was made, removed or renamed in each of ``dirs``: their mtime and ctime
        move, as POSIX says (``make``, backups and caches look at a directory's mtime)."""
        now = _now_ns()
        for directory in dirs:
            directory.mtime_ns = directory.ctime_ns = now
        self.dirs_changed.update(dirs)
        self.dirs_touched.update(dirs)

    def _load(self, mount: StoreMount) -> None:
        """Build (or rebuild) a store's subtree from a snapshot of the store."""
        snap = self.service.snapshot(mount.store_id)
        mount.revision = snap.revision
        mount.last_seq = snap.last_seq
        mount.archived = snap.store.archived_at is not None
        mount.count = snap.store.memory_count
        mount.max_memories = snap.store.max_memories or limits.MAX_MEMORIES_PER_STORE
        mount.max_bytes = snap.store.max_content_bytes or limits.MAX_CONTENT_BYTES
        now = _now_ns()
        root = Node(self._next_ino, mount.slug, self.root, True, mount, now, now)
        self._next_ino += 1
        self.nodes[root.ino] = root
        set_child(self.root, mount.slug, root)
        mount.root = root
        mount.directories = {prefix.strip("/") for prefix in snap.directories}
        for prefix in mount.directories:
            self._ensure_dir(mount, prefix)
        for memory in snap.memories:
            self._place(mount, memory)

    def _ensure_dir(self, mount: StoreMount, rel: str) -> Node:
        """The directory at ``rel``, made where missing. A file in the way is one the store
        does not have there (it has a directory): another writer removed it and put files under
        its name before this mount looked, and it goes, as that removal will say; or this mount
        made it and has not saved it yet, and it leaves the tree but stays open: its save finds
        the directory and fails, as its close says (a new file whose save fails goes)."""
        assert mount.root is not None
        node = mount.root
        for part in [p for p in rel.split("/") if p]:
            child = node.children.get(part)
            if child is not None and not child.is_dir:
                self.vanished.append(Invalidation("entry", node.ino, part))
                if child.memory_id is None and child.file is not None:
                    drop_child(node, part)
                else:
                    self._detach(child)
                child = None
            if child is None:
                child = self._new_node(part, node, True)
                self._entries_changed(node)
            node = child
        return node

    def _place(self, mount: StoreMount, memory: Memory) -> Node:
        parent_rel, _, name = memory.path[1:].rpartition("/")
        parent = self._ensure_dir(mount, parent_rel)
        node = self._new_node(name, parent, False, _ns(memory.updated_at))
        self._entries_changed(parent)
        self._apply_memory(node, memory)
        return node

    def _move(self, node: Node, dst_dir: Node, new_name: str) -> None:
        assert node.parent is not None
        drop_child(node.parent, node.name)
        node.parent = dst_dir
        node.name = new_name
        set_child(dst_dir, new_name, node)
        node.ctime_ns = _now_ns()

    def _follow(self, mount: StoreMount, node: Node, path: str) -> list[Invalidation] | None:
        """Move ``node`` to ``path``, where its memory is now (renamed elsewhere): the file
        keeps its inode, so a descriptor open on it goes on reading and writing it, as one
        does on a file another process renamed, and its save goes to the memory. None, and
        nothing moved, if this mount's own work holds ``path``: a directory, or a file not
        saved yet there."""
        existing = self._lookup_path(mount, path)
        if existing is node:
            return []
        if existing is not None and (
            existing.is_dir
            or (existing.file is not None and (existing.memory_id is None or existing.file.dirty))
        ):
            return None
        assert node.parent is not None
        out = [Invalidation("entry", node.parent.ino, node.name)]
        if existing is not None:
            assert existing.parent is not None
            out.append(Invalidation("entry", existing.parent.ino, existing.name))
            self._detach(existing)
        parent_rel, _, name = path[1:].rpartition("/")
        was, parent = node.parent, self._ensure_dir(mount, parent_rel)
        self._move(node, parent, name)
        self._entries_changed(was, parent)
        out.append(Invalidation("entry", parent.ino, name))  # a "no such name" it may keep
        return [*out, Invalidation("attrs", was.ino), Invalidation("attrs", parent.ino)]

    def _apply_memory(self, node: Node, memory: Memory) -> None:
        if node.memory_id is not None and node.memory_id != memory.id:
            self.by_memory.pop(node.memory_id, None)
        twin = self.by_memory.get(memory.id)
        if twin is not None and twin is not node and twin.file is None:
            self._drop_twin(twin)
        self.by_memory[memory.id] = node
        node.memory_id = memory.id
        node.version_id = memory.memory_version_id
        node.sha256 = memory.content_sha256
        node.size = memory.content_size_bytes
        node.temporary = False
        mtime = _ns(memory.updated_at)
        node.mtime_ns = node.ctime_ns = mtime

    def _is_twin(self, node: Node) -> bool:
        """Does another node show ``node``'s memory? (See ``_drop_twin``.)"""
        shown = None if node.memory_id is None else self.by_memory.get(node.memory_id)
        return shown is not None and shown is not node and not node.unlinked

    def _drop_twin(self, twin: Node) -> None:
        """``twin`` showed a memory where it was before another writer moved it, and a save
        here at the new path found it there (``save_file``): its old place goes. One open here
        stays until its last close (its save goes to the memory, and the file follows)."""
        assert twin.parent is not None
        self.vanished.append(Invalidation("entry", twin.parent.ino, twin.name))
        self._detach(twin)

    def path(self, node: Node) -> str:
        """The store path of a node inside a store (``/a/b.md``)."""
        parts: list[str] = []
        while node.parent is not None and node.parent is not self.root:
            parts.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(parts))

    def where(self, node: Node) -> str:
        """A node's place below the mount root (``notes/todo.md``; ``.`` for the root)."""
        parts: list[str] = []
        while node.parent is not None:
            parts.append(node.name)
            node = node.parent
        return "/".join(reversed(parts)) or "."

    def ino_of(self, fh: int) -> int:
        """The inode an open file handle is on (0 if there is no such handle)."""
        handle = self.handles.get(fh)
        return handle.node.ino if handle is not None else 0

    def node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise FsError(errno.ENOENT, f"no inode {ino}") from None

    def find(self, parent: Node, name: str) -> Node | None:
        """The entry ``name`` of a directory, or None. What the tree holds; the parts that
        make entries when asked for (``.history``, ``.mnemofs``) make them here."""
        if not parent.is_dir:
            raise FsError(errno.ENOTDIR, f"{parent.name!r} is not a directory")
        return parent.children.get(name)

    def child(self, parent: Node, name: str) -> Node:
        node = self.find(parent, name)
        if node is None:
            raise FsError(errno.ENOENT, f"no entry {name!r}")
        return node

    def _forget_node(self, node: Node) -> None:
        """Drop a node that left the tree once the kernel and open files let go of it."""
        if node.lookups <= 0 and node.file is None and node.ino != ROOT_INO:
            self.nodes.pop(node.ino, None)
            self._content_bytes -= len(self._content.pop(node.ino, b""))

    def _detach(self, node: Node) -> None:
        if node.parent is not None and node.parent.children.get(node.name) is node:
            drop_child(node.parent, node.name)
            self._entries_changed(node.parent)
        if node.memory_id is not None and self.by_memory.get(node.memory_id) is node:
            del self.by_memory[node.memory_id]
        node.unlinked = True
        self.dirs_touched.discard(node)  # (a mount with nobody else writing never looks)
        self._forget_node(node)

    def forget(self, ino: int, count: int) -> None:
        node = self.nodes.get(ino)
        if node is None:
            return
        node.lookups -= count
        if node.unlinked:
            self._forget_node(node)

    def lookup(self, parent_ino: int, name: str) -> Node | None:
        """The entry ``name`` of a directory, counted as the kernel's; None if there is none.
        A miss is no exception: every create, mkdir and rename looks its new name up first."""
        node = self.find(self.node(parent_ino), name)
        if node is not None:
            node.lookups += 1
        return node

    def take_vanished(self) -> list[Invalidation]:
        """Names that vanished without the kernel's doing since the last call (a new file whose
        first save failed), for the adapter to make the kernel forget."""
        vanished, self.vanished = self.vanished, []
        return vanished

    def looked_up(self, node: Node) -> None:
        """The kernel took a reference to ``node`` without a lookup (readdirplus returned it):
        counted as one, so ``forget`` balances."""
        node.lookups += 1

    def readdir(self, ino: int, after: int) -> Iterator[tuple[str, Node]]:
        """Entries in inode order past ``after``: offsets stay valid while entries change."""
        parent = self.node(ino)
        if not parent.is_dir:
            raise FsError(errno.ENOTDIR, f"{parent.name!r} is not a directory")
        listing = parent.listing
        if listing is None:
            listing = parent.listing = sorted(parent.children.values(), key=_INO)
        for node in listing[bisect.bisect_right(listing, after, key=_INO) :]:
            yield node.name, node

    def _lookup_path(self, mount: StoreMount, path: str) -> Node | None:
        node = mount.root
        for part in path.strip("/").split("/"):
            if node is None:
                return None
            node = node.children.get(part)
        return node

    def check_write(self, ino: int, what: str, *, allowed: bool) -> None:
        """May the caller change ``ino`` (or entries in it)? A read-only store or the root says
        EROFS to everyone, first, as a read-only filesystem does; then a caller the mount's
        access rules do not allow (``allowed``, see ``fs/access.py``) gets EACCES."""
        self._writable(self.node(ino), what)
        if not allowed:
            raise FsError(errno.EACCES, f"{what}: this user may not use the mount")

    def _writable(self, node: Node, what: str) -> StoreMount:
        if node.history is not None:
            raise FsError(errno.EROFS, f"{what}: .history is read-only (copy a version out)")
        if node.unlinked and node.is_dir:  # a working directory removed elsewhere
            raise FsError(errno.ENOENT, f"{what}: the directory {node.name!r} was removed")
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
