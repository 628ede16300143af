"""``.history/`` in every store of the mount: its past, read-only, reachable by path only
(issue 19).

``<store>/.history/<path>/`` is a directory holding one file per version of the memory whose
last path is ``<path>`` (a deleted memory's too), oldest first, named
``0003-modified-2026-12-01T113332Z`` (number, operation, UTC time); a redacted version is
``0002-redacted-...`` and empty. Names with history below ``<path>`` are subdirectories of it.
``.history`` itself is never listed in its store (``ls -a``, ``find``, ``grep -r`` and
backups do not walk into it), as ZFS hides ``.zfs``; everything in it is ``EROFS``. The name is
always the history's: memories whose path begins ``/.history/`` (which other faces can make)
are not shown in a mount.

Restoring is an ordinary copy: ``cp .history/notes/todo.md/0003-... notes/todo.md`` saves
that content as one new version.

The nodes here are made on demand from the store (``Backend.path_history``), refreshed when a
directory is listed or a name in it is not known yet, and dropped when the kernel forgets
them. Version files never change (a redaction changes the name), so their content is cached
like any other.
"""

from __future__ import annotations

from collections.abc import Iterator

from mnemofs.fs.files import FilesMixin
from mnemofs.fs.nodes import Node, _now_ns, _ns, drop_child
from mnemofs.models import HistoryEntry

HISTORY = ".history"


def version_name(number: int, entry: HistoryEntry) -> str:
    """``0003-modified-2026-12-01T113332Z``: sorts oldest first, reads as what and when."""
    operation = "redacted" if entry.redacted else entry.operation
    when = entry.created_at[:19].replace(":", "") + "Z"
    return f"{number:04d}-{operation}-{when}"


class HistoryMixin(FilesMixin):
    """``.history``: see the module docstring."""

    def find(self, parent: Node, name: str) -> Node | None:
        if parent.history is not None:
            found = parent.children.get(name)
            if found is None:
                self._fill_history(parent)
                found = parent.children.get(name)
            return found
        if name == HISTORY and parent.mount is not None and parent is parent.mount.root:
            return self._history_root(parent)
        return super().find(parent, name)

    def readdir(self, ino: int, after: int) -> Iterator[tuple[str, Node]]:
        node = self.node(ino)
        if node.history is not None and after == 0:
            self._fill_history(node)
        entries = super().readdir(ino, after)
        if node.mount is None or node is not node.mount.root or HISTORY not in node.children:
            return entries
        # Memories under /.history/ (made through the API, the CLI or a synced folder) make a
        # directory of that name; listed, the kernel would take it for the name and hide the
        # history behind it. The name is the history's; those memories' own versions are
        # under .history/.history/.
        return ((name, child) for name, child in entries if name != HISTORY)

    def forget(self, ino: int, count: int) -> None:
        node = self.nodes.get(ino)
        super().forget(ino, count)
        while node is not None and node.history is not None and node.lookups <= 0:
            if node.children or node.file is not None or node.parent is None:
                return
            # Forgotten by the kernel: the next lookup makes it again from the store.
            parent = node.parent
            if parent.children.get(node.name) is node:
                drop_child(parent, node.name)
            self.nodes.pop(node.ino, None)
            self._content_bytes -= len(self._content.pop(node.ino, b""))
            node = parent if parent.history is not None else None

    def _history_root(self, store_root: Node) -> Node:
        mount = store_root.mount
        assert mount is not None
        root = self._history_roots.get(mount.store_id)
        if root is None or root.ino not in self.nodes:
            now = _now_ns()
            root = Node(self._next_ino, HISTORY, store_root, True, mount, now, now)
            root.history = "/"
            self._next_ino += 1
            self.nodes[root.ino] = root
            self._history_roots[mount.store_id] = root
        return root

    def _fill_history(self, directory: Node) -> None:
        """The directory's entries as the store has them now: version files, then names."""
        mount = directory.mount
        assert mount is not None
        assert directory.history is not None
        found = self.service.path_history(mount.store_id, directory.history)
        wanted: dict[str, tuple[HistoryEntry | None, str]] = {}
        for number, version in enumerate(found.versions, 1):
            wanted[version_name(number, version)] = (version, directory.history)
        base = directory.history.rstrip("/")
        for name in found.names:
            wanted.setdefault(name, (None, f"{base}/{name}"))
        for name in [n for n in directory.children if n not in wanted]:
            gone = directory.children[name]
            drop_child(directory, name)
            gone.unlinked = True
        for name, (entry, path) in wanted.items():
            if name in directory.children:
                continue
            if entry is None:
                node = self._new_node(name, directory, True)
                node.history = path
            else:
                node = self._new_node(name, directory, False, _ns(entry.created_at))
                node.history = path
                node.history_version = entry.version_id
                node.size = (
                    0 if entry.redacted or entry.operation == "deleted" else (entry.size_bytes)
                )
