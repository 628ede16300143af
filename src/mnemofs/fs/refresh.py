"""Catching up with changes made elsewhere (another mount, the CLI, the API): which nodes
change and which kernel caches to drop.
"""

from __future__ import annotations

import contextlib

from mnemofs.errors import NotFound
from mnemofs.fs.files import FilesMixin
from mnemofs.fs.nodes import (
    Invalidation,
    StoreMount,
)
from mnemofs.models import Change, Memory, MemoryId, StoreId, StoreState

REFRESH_CHANGES = 10_000  # changes read at a time when catching up with a store


class RefreshMixin(FilesMixin):
    """Catching up with changes made elsewhere (another mount, the CLI, the API): which nodes"""

    def refresh(self, states: dict[StoreId, StoreState] | None = None) -> list[Invalidation]:
        """Bring the tree up to date with the store (as ``states`` says it is, if given: as
        the change signal heard them); say which kernel caches to drop."""
        in_step, self.in_step = self.in_step, False  # False until this refresh has ended
        if states is None:
            states = self.service.store_states([m.store_id for m in self.mounts])
        out: list[Invalidation] = []
        self.dirs_changed.clear()  # what our own requests changed, the kernel knows of
        for mount in self.mounts:
            state = states.get(mount.store_id)
            if state is None or state.revision == mount.revision:
                continue
            if in_step and self._own_moves(mount, state):
                continue
            while not self._catch_up(mount, state, out):
                pass  # more changes than one batch reads: on to the next
        # A directory whose entries changed has a new mtime and maybe link count: its cached
        # attributes go too (the kernel keeps them for adapter.TIMEOUT_S otherwise).
        out += [Invalidation("attrs", d.ino) for d in self.dirs_changed if not d.unlinked]
        out += self.take_vanished()
        self.dirs_changed.clear()
        self.in_step = True
        return out

    def _catch_up(self, mount: StoreMount, state: StoreState, out: list[Invalidation]) -> bool:
        """Show the next ``REFRESH_CHANGES`` of the store's changes; True once they were the
        last and the store's ``state`` is taken as seen.

        Everything is read before anything is taken: a read that fails (the database went
        away) leaves the mount's revision and feed position as they were, for the next
        refresh to read again. Taken first, that refresh saw the revision as known and
        skipped the store: the tree stayed behind until its next change. The revision is
        taken only with the last batch, for the same reason."""
        changes = self.service.changes(mount.store_id, mount.last_seq, limit=REFRESH_CHANGES)
        last = len(changes) < REFRESH_CHANGES
        latest: dict[str, Change] = {}  # the newest change of each memory, in seq order
        theirs: set[str] = set()  # memories someone else changed: read, whoever did last
        for change in changes:
            changed = change.version.memory_id
            latest.pop(changed, None)
            latest[changed] = change
            who = change.version.created_by
            if who is None or who.stored != self.actor:
                theirs.add(changed)
        # A change of ours after theirs (a rename here of a file another writer had just
        # saved) does not make the tree show their content: it only moved what it had.
        news = [m for m, change in latest.items() if m in theirs or not self._knows(change)]
        found: dict[MemoryId, Memory] = {}
        if news:
            # One read for all (through a server, one request per hundred, not one each).
            with contextlib.suppress(NotFound):  # the store is gone: so is every memory
                found = self.service.get_memories(mount.store_id, news)
        directories = self.service.explicit_directories(mount.store_id) if last else []
        if last:
            mount.revision = state.revision
            mount.archived = state.archived_at is not None
            mount.count = state.memory_count
            if mount.root is not None:
                out.append(Invalidation("inode", mount.root.ino))
        for change in changes:
            mount.last_seq = change.seq
            self._heard(mount, change)
        for memory_id in news:
            out += self._apply_change(mount, memory_id, found.get(MemoryId(memory_id)))
        if last:
            out += self._sync_directories(mount, directories)
        return last

    def _own_moves(self, mount: StoreMount, state: StoreState) -> bool:
        """Whether the store moved to ``state`` by this mount's own changes alone, which the
        tree showed as it made them (a remote mount: moves.py); if so it is taken as seen."""
        last_seq = self.service.own_moves(mount.store_id, mount.revision, state.revision)
        if last_seq is None:
            return False
        mount.revision, mount.count = state.revision, state.memory_count
        mount.last_seq = max(mount.last_seq, last_seq)
        return True

    def adopt_own(self, version: int | None) -> bool:
        """After a look that heard no other writer (SQLite's ``data_version`` still
        ``version`` on this thread): what moved the stores' revisions and change feeds since
        the last look is this mount's own changes, which the tree showed as it made them, so
        take them as seen. Otherwise the next refresh (the upkeep's commits, on a connection
        of their own, trigger one about every 2 s while saves go on) read every one of them
        back to find nothing new: ~35 ms on the request thread for 2 s of saves. False, and
        nothing taken, while the tree may be behind (``in_step``) or when the store cannot say
        the moves were all the tree's own (an eviction a save made): the caller refreshes."""
        if not self.in_step:
            return False
        heads = self.service.own_since([m.store_id for m in self.mounts], version)
        if heads is None:
            return False
        for mount in self.mounts:
            head = heads.get(mount.store_id)
            if head is None:
                continue
            state, last_seq = head
            mount.revision, mount.count = state.revision, state.memory_count
            mount.last_seq = max(mount.last_seq, last_seq)
        return True

    def _heard(self, mount: StoreMount, change: Change) -> None:
        """A change by someone else goes into ``.mnemofs/changes``, and its file remembers it
        (a save here through a descriptor that never saw it is a lost update)."""
        version = change.version
        who = version.created_by
        if who is None or who.stored == self.actor:
            return
        actor = who.label
        path = version.path or "(redacted)"
        self.notices.add(
            "changes", f"{version.created_at}  {mount.slug}{path}  {version.operation}  by {actor}"
        )
        node = self.by_memory.get(version.memory_id)
        if node is not None and version.content_sha256 != node.sha256:  # a rename saves none
            node.other_version = (version.id, actor, version.created_at)

    def _knows(self, change: Change) -> bool:
        """Is ``change`` one of ours that the tree already shows? (A save whose commit outcome
        was unknown, or another mount of this same session, makes ours that it does not.)"""
        version = change.version
        if version.created_by is None or version.created_by.stored != self.actor:
            return False
        node = self.by_memory.get(version.memory_id)
        if node is None:
            return version.operation == "deleted"
        return node.version_id == version.id

    def _apply_change(
        self, mount: StoreMount, memory_id: str, memory: Memory | None
    ) -> list[Invalidation]:
        """Show ``memory`` as it now is (None: it is gone) where the tree has ``memory_id``."""
        out: list[Invalidation] = []
        node = self.by_memory.get(memory_id)
        if node is not None and memory is not None and self.path(node) != memory.path:
            out += self._follow(mount, node, memory.path) or []  # renamed: a descriptor follows
        if node is not None and node.file is not None and node.file.dirty:
            # Our unsaved edit wins at its save (the last commit is the head), which compares
            # it with what the store holds now: the same bytes make no version, others do. A
            # save that fails puts back what is saved: theirs now, not what this mount saved.
            if memory is not None:
                node.version_id, node.sha256 = memory.memory_version_id, memory.content_sha256
                self._cache(node, (memory.content or "").encode())
            return out
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
                # content wins at its save (the last commit is the head; nothing is lost). A
                # save that fails puts back what is saved: that memory's bytes.
                self._apply_memory(existing, memory)
                self._cache(existing, (memory.content or "").encode())
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

    def _sync_directories(self, mount: StoreMount, directories: list[str]) -> list[Invalidation]:
        """Show the store's explicit ``directories`` made elsewhere (mkdir through another
        mount), and drop the empty directories it no longer has: removed, emptied or moved
        elsewhere (an implied directory goes with its last memory; every removal here keeps
        its directory explicit, as POSIX keeps it). Looked at: the directories whose entries
        changed since the last look (a save here that followed its memory away empties one
        too), and those the store no longer lists; a parent they leave empty, in turn."""
        out: list[Invalidation] = []
        for prefix in directories:
            if self._lookup_path(mount, prefix) is None:
                node = self._ensure_dir(mount, prefix.strip("/"))
                assert node.parent is not None
                out.append(Invalidation("entry", node.parent.ino, node.name))
        listed = {prefix.strip("/") for prefix in directories}
        gone = [self._lookup_path(mount, rel) for rel in mount.directories - listed]
        mount.directories = listed
        suspects = [d for d in self.dirs_touched if d.mount is mount] + [d for d in gone if d]
        while suspects:
            node = suspects.pop()
            if (
                node.parent is None
                or node is mount.root
                or not node.is_dir
                or node.children
                or node.unlinked
                or node.history is not None
                or self.path(node).strip("/") in listed
            ):
                continue
            out.append(Invalidation("entry", node.parent.ino, node.name))
            suspects.append(node.parent)
            self._detach(node)
        self.dirs_touched = {d for d in self.dirs_touched if d.mount is not mount}
        return out
