"""The filesystem's data: nodes, open files, handles, the mounted stores, refusals with an errno."""

from __future__ import annotations

import errno
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from mnemofs import errors
from mnemofs.models import StoreId

ROOT_INO = 1


TEMP_GRACE_S = 2.0
# Temporary files past their grace that cannot be saved yet (the store full, or refused as they
# are) stay in the daemon's memory up to this many bytes in all; the newest beyond it go.
TEMP_KEPT_BYTES = 64 * 2**20
TEMP_KEPT_HINT = "remove temporary files left behind, or save them under a name the store takes"


# Files held open (or unsaved) in the daemon: at most this many bytes in all, each counting
# BUFFER_OVERHEAD_BYTES more for itself. Past it a write is ENOSPC, and an open that would
# add a file ENFILE: without it, files opened and written, never closed, grew the daemon
# without end (3,000 of 100 KB: +300 MB; the store's limits count saved memories only).
BUFFER_BYTES = 256 * 2**20
BUFFER_OVERHEAD_BYTES = 1024
BUFFERS_HINT = "close files you are done with: a mount holds at most 256 MiB of open files"

FOLD_WINDOW_S = 300.0

# A saved file renamed to a backup of its name (``f`` to ``f.bak``, ``f~``, ``f.orig``) and a
# new file saved at the name within this long is one edit that kept a backup (``sed -i.bak``,
# ``perl -i.bak``, Emacs): the name keeps its memory, and the backup becomes a new one.
BACKUP_WINDOW_S = 2.0


# Saved content kept in the daemon: at most this many files and this many bytes, the least
# recently used going first (a miss reads the store: one indexed row).
CONTENT_CACHE_ENTRIES = 4096
CONTENT_CACHE_BYTES = 16 * 1024 * 1024
# A file read from the store brings along files of its directory that are not cached, the
# next ones in listing order: none at a directory's first miss, then 4, doubling with each miss
# that follows within READ_AHEAD_RESET_S, up to this many and (by their sizes) about this many
# bytes. One request instead of one each for a `grep -r` or `cat *` through a server, and a
# lone `cat` reads what it did.
READ_AHEAD_FILES = 64
READ_AHEAD_BYTES = 256 * 1024
READ_AHEAD_RESET_S = 1.0
READ_AHEAD_LOOK = 1024  # entries of the directory looked at for them, at most
READ_AHEAD_DIRS = 64  # directories whose misses are remembered


class FsError(Exception):
    """A POSIX refusal the store has no word for (ENOTDIR, EXDEV, EROFS...)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.errno = code
        self.message = message


# Most specific first: the errno a filesystem caller sees for each domain error.
_ERRNOS: tuple[tuple[type[Exception], int], ...] = (
    (errors.ContentTooLarge, errno.EFBIG),
    (errors.StoreFull, errno.ENOSPC),
    (errors.LimitExceeded, errno.ENOSPC),
    (errors.InvalidContent, errno.EILSEQ),
    (errors.InvalidName, errno.EILSEQ),
    (errors.SecretDetected, errno.EACCES),
    (errors.NameTooLong, errno.ENAMETOOLONG),
    (errors.InvalidRequest, errno.EINVAL),
    (errors.NotFound, errno.ENOENT),
    (errors.Conflict, errno.EEXIST),
    (errors.PreconditionFailed, errno.EBUSY),
    (errors.StoreArchived, errno.EROFS),
    (errors.AccessRevoked, errno.EACCES),
    (errors.StorageFull, errno.ENOSPC),
    (errors.Unavailable, errno.EIO),
)


def errno_for(exc: Exception) -> int:
    """The errno a filesystem caller gets for ``exc`` (EIO for anything unforeseen)."""
    if isinstance(exc, FsError):
        return exc.errno
    for kind, code in _ERRNOS:
        if isinstance(exc, kind):
            return code
    return errno.EIO


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
    max_memories: int = 10_000  # the store's cap (its own, else the global limit)
    max_bytes: int = 102_400  # the store's cap on one memory (its own, else the global one)
    root: Node | None = None
    # The store's explicit directories as last seen ("a/b"): one it no longer lists is looked
    # at (``RefreshMixin._sync_directories``).
    directories: set[str] = field(default_factory=set)

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
    subdirs: int = 0  # how many of ``children`` are directories (st_nlink = 2 + subdirs)
    atime_ns: int = 0  # set only by utimensat; 0: the same as mtime (reads do not move it)
    memory_id: str | None = None
    version_id: str | None = None
    sha256: str | None = None
    size: int = 0
    lookups: int = 0
    file: OpenFile | None = None
    temporary: bool = False  # a temp-named file kept in memory (see the module docstring)
    temp_since: float = 0.0
    # A temporary file whose save as a memory the store refused: the hash of those bytes
    # (``TemporariesMixin._keep_refused``); not tried again while they are the same.
    refused: int | None = None
    born: float = 0.0  # when this mount created it (0: it came from the store)
    unlinked: bool = False
    # The kernel's page cache for this file may hold bytes that are not the saved content (a
    # save failed and was rolled back, or it changed elsewhere): the next open drops it.
    stale_pages: bool = False
    # Under ``.history`` (fs/history.py): the store path this node shows the past of ("/" for
    # ``.history`` itself), and for a version file, that version. Read-only, never listed
    # in the store's own directories.
    history: str | None = None
    history_version: str | None = None
    # ``.mnemofs/refusals`` or ``.mnemofs/changes`` (fs/notices.py): made from the NoticeLog.
    report: str | None = None
    # The newest version another writer saved of this file, as this mount learned of it:
    # (version id, who, when). A save through a descriptor that never saw it is a lost update.
    other_version: tuple[str, str, str] | None = None
    # A directory's children in inode order, as the last readdir sorted them; None once they
    # change (``set_child``, ``drop_child``). A listing takes several READDIR requests, each
    # of which sorted them all again.
    listing: list[Node] | None = None

    @property
    def current_size(self) -> int:
        return len(self.file.data) if self.file is not None else self.size


@dataclass(eq=False)
class Backup:
    """A saved file just renamed to a backup of its name (see ``BACKUP_WINDOW_S``)."""

    memory_id: str
    node: Node
    path: str  # the backup's store path
    sha256: str | None
    at: float  # time.monotonic() of the rename


def is_backup_name(name: str, of: str) -> bool:
    """``f.bak``, ``f~``, ``f.orig``, ``f.~1~`` back ``f`` up."""
    return name != of and name.startswith(of)


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
    seen: str | None = None  # the version this descriptor opened (or last saved)
    # Opened write-only: its writes bypass the kernel's page cache (``direct_io``). The kernel
    # drops the pages a direct write covers (since Linux 6.6); the node's pages are marked
    # stale as well, so the next open starts from the saved content on any kernel.
    direct: bool = False


class NoticeLog:
    """The lines of ``.mnemofs/refusals`` and ``.mnemofs/changes``, newest first, bounded."""

    KEPT = 200

    def __init__(self) -> None:
        self.lines: dict[str, deque[str]] = {
            "refusals": deque(maxlen=self.KEPT),
            "changes": deque(maxlen=self.KEPT),
        }
        self.nodes: dict[str, Node] = {}  # their files, once looked up
        self.sizes = dict.fromkeys(self.lines, 0)  # bytes of each text, kept as lines come and go

    def add(self, kind: str, line: str) -> None:
        """Called for every change a mount hears: costs the line, never the whole text."""
        lines = self.lines[kind]
        if len(lines) == lines.maxlen:
            self.sizes[kind] -= len(lines[-1].encode()) + 1  # the oldest line drops out
        lines.appendleft(line)
        self.sizes[kind] += len(line.encode()) + 1
        node = self.nodes.get(kind)
        if node is not None:
            node.size = self.sizes[kind]

    def text(self, kind: str) -> bytes:
        return "".join(line + "\n" for line in self.lines[kind]).encode()


@dataclass(frozen=True)
class Invalidation:
    """A kernel cache entry to drop after the store changed under the mount: a name
    (``entry``), an inode's attributes and pages (``inode``), or its attributes alone
    (``attrs``: safe from inside a request, see ``adapter.drop_entries``)."""

    kind: Literal["inode", "entry", "attrs"]
    ino: int
    name: str = ""


def _now_ns() -> int:
    return time.time_ns()


def _ns(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1e9)


def set_child(parent: Node, name: str, node: Node) -> None:
    """Put ``node`` at ``name`` in ``parent``, keeping ``parent.subdirs`` right (getattr reads
    it on every stat of a directory: counting children there would cost a walk each time)."""
    old = parent.children.get(name)
    parent.subdirs += node.is_dir - (old is not None and old.is_dir)
    parent.children[name] = node
    parent.listing = None


def drop_child(parent: Node, name: str) -> None:
    parent.subdirs -= parent.children.pop(name).is_dir
    parent.listing = None
