"""The filesystem in domain terms: the inode tree of a mounted session, open-file buffers, saves.

No pyfuse3 here (``adapter.py`` translates): every method is a plain call that returns nodes
and bytes or raises ``FsError`` (a POSIX refusal with its errno) or a store error (mapped by the
adapter). The store owns every rule about memories; this module decides *when* to call it.

Concurrency contract: ``MemoryFs`` is used from the trio thread only, one request at a time
between awaits; no method awaits, so each runs atomically with respect to the others. Store
calls block that thread (a local SQLite commit is ~100 µs, cheaper than a thread hop), with
two exceptions, each made again after pauses in which other requests are served: a change
whose first write finds a lock held by another process (SQLite's; on PostgreSQL a store's
row), or its database or server away for a moment (``Patience.unreachable``), gets
``WriteWouldWait`` (``Adapter._change``); and an open whose read of the store fails while it
is away (``Adapter._waiting_out``). So a change must leave the tree exactly as it was until
its first store write (a method that changes something before it puts it back on
``WriteWouldWait``), and ``open`` as it was until its read.

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
  after ``TEMP_GRACE_S`` (or at unmount); one the store refuses stays as it is, in memory,
  until its bytes change. They never count toward the store's limit.
- A file created through this mount and renamed over another within ``FOLD_WINDOW_S`` is
  folded: the target takes its content as one version and the new file's own history is
  dropped, so ``write tmp; rename tmp target`` leaves exactly one version whatever the name.
- A saved file renamed to a backup of its name (``f.bak``, ``f~``) and a new file saved at
  the name within ``BACKUP_WINDOW_S`` is one edit that kept a backup (``sed -i.bak``): the
  name takes its memory back, and the backup becomes a new memory (``_take_back``).
"""

from __future__ import annotations

from mnemofs.fs.history import HistoryMixin
from mnemofs.fs.names import NamesMixin
from mnemofs.fs.nodes import (
    FOLD_WINDOW_S,
    ROOT_INO,
    TEMP_GRACE_S,
    FsError,
    Handle,
    Invalidation,
    Node,
    OpenFile,
    StoreMount,
)
from mnemofs.fs.notices import NoticesMixin
from mnemofs.fs.refresh import RefreshMixin
from mnemofs.fs.temporaries import TemporariesMixin

__all__ = [
    "FOLD_WINDOW_S",
    "ROOT_INO",
    "TEMP_GRACE_S",
    "FsError",
    "Handle",
    "Invalidation",
    "MemoryFs",
    "Node",
    "OpenFile",
    "StoreMount",
]


class MemoryFs(HistoryMixin, NoticesMixin, NamesMixin, TemporariesMixin, RefreshMixin):
    """The mounted session: root directory, one directory per attached store. The parts:
    ``tree.py`` (nodes, lookups, permissions), ``files.py`` (buffers and saves),
    ``temporaries.py`` (temporary files left alone), ``names.py`` (directories, unlink,
    renames), ``refresh.py`` (changes made elsewhere)."""
