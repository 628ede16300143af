"""Directories and names: mkdir, rmdir, unlink, and renames (over a target, of a directory)."""

from __future__ import annotations

import errno
import time
from contextlib import suppress

from mnemofs.content import Content
from mnemofs.errors import MnemofsError, NotFound, WriteWouldWait
from mnemofs.fs.files import FilesMixin
from mnemofs.fs.history import HISTORY
from mnemofs.fs.nodes import (
    BACKUP_WINDOW_S,
    FOLD_WINDOW_S,
    Backup,
    FsError,
    Invalidation,
    Node,
    StoreMount,
    is_backup_name,
    set_child,
)
from mnemofs.paths import TEMP_NAME


class NamesMixin(FilesMixin):
    """Directories and names: mkdir, rmdir, unlink, and renames (over a target, of a directory)."""

    def mkdir(self, parent_ino: int, name: str) -> Node:
        parent = self.node(parent_ino)
        mount = self._writable(parent, "mkdir")
        path = self._check_new_path(parent, name)
        if name in parent.children:
            raise FsError(errno.EEXIST, f"{name!r} exists")
        self.service.make_directory(mount.store_id, path)
        node = self._new_node(name, parent, True)
        node.lookups += 1
        self._entries_changed(parent)
        return node

    def rmdir(self, parent_ino: int, name: str) -> None:
        parent = self.node(parent_ino)
        node = self.child(parent, name)
        self._writable(node, "remove")  # .history itself
        mount = self._writable(parent, "remove")
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
        if node.children:
            raise FsError(errno.ENOTEMPTY, f"{name!r} is not empty")
        # The directory holding it stays, as on a disk: kept by the store if this empties it
        # (asked only then: the check is a statement more, ~6 µs of a ~40 µs removal).
        keep = parent is not mount.root and len(parent.children) == 1
        with suppress(NotFound):  # only this mount still showed it
            self.service.remove_directory(mount.store_id, self.path(node), keep_directory=keep)
        self._detach(node)
        self._entries_changed(parent)

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
        self._entries_changed(parent)

    def rename(
        self,
        old_parent: int,
        old_name: str,
        new_parent: int,
        new_name: str,
        *,
        noreplace: bool = False,
    ) -> None:
        src_dir, dst_dir = self.node(old_parent), self.node(new_parent)
        node = self.child(src_dir, old_name)
        mount = self._writable(src_dir, "rename")
        dst_mount = self._writable(dst_dir, "rename into")
        self._writable(node, "rename")  # .history itself
        if new_name == HISTORY and dst_mount.root is dst_dir:
            raise FsError(errno.EROFS, "rename: .history is read-only")
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
        self._entries_changed(src_dir, dst_dir)

    def _rename_file(
        self, mount: StoreMount, node: Node, dst_dir: Node, new_name: str, new_path: str
    ) -> None:
        if node.memory_id is not None:
            taken = self._take_back(mount, new_path, None, source=node)
            if taken is not None:  # the backup is new and the source gone: the count stays
                node.born = 0.0  # the path's old memory now: never folded into another
                memory = taken
            else:
                memory = self.service.update_memory(
                    mount.store_id,
                    node.memory_id,
                    path=new_path,
                    actor=self.actor,
                    keep_directory=True,
                )
            stale = memory.content_sha256 != node.sha256
            self._apply_memory(node, memory)
            if stale:
                self._forget_shown(node)
        was = (node.parent or self.root, node.name)
        self._move(node, dst_dir, new_name)
        if node.memory_id is not None and was[0] is dst_dir and is_backup_name(new_name, was[1]):
            self._backed_up(mount, node, self.path(was[0]).rstrip("/") + "/" + was[1])
        if node.temporary and not TEMP_NAME.match(new_name):
            node.temporary = False  # a real name now: save it like any file
            if node.file is not None and node.file.opens == 0:
                try:
                    self.save(node, undo=False)
                except (MnemofsError, FsError, WriteWouldWait):
                    # The rename fails (or, on WriteWouldWait, is made again), and the file
                    # stays what it was, where the kernel still has it: a temporary file
                    # under its own name, every byte kept.
                    node.temporary = True
                    self._move(node, *was)
                    raise
                finally:
                    self._drop_clean_buffer(node)

    def _backed_up(self, mount: StoreMount, node: Node, old_path: str) -> None:
        """``node`` (saved) was renamed from ``old_path`` to a backup of its name: a new file
        saved there soon takes its memory back (``FilesMixin._take_back``)."""
        now = time.monotonic()
        for key in [k for k, b in self.backups.items() if now - b.at > BACKUP_WINDOW_S]:
            del self.backups[key]
        assert node.memory_id is not None
        self.backups[(mount.store_id, old_path)] = Backup(
            node.memory_id, node, self.path(node), node.sha256, now
        )

    def _rename_over(self, mount: StoreMount, node: Node, target: Node) -> None:
        """``rename(node, target)``: the target keeps its id and takes node's content."""
        if target.memory_id is None:  # the target was never saved: plain replace
            dst_dir, path = target.parent or self.root, self.path(target)
            times = dst_dir.mtime_ns, dst_dir.ctime_ns
            self._detach(target)
            try:
                self._rename_file(mount, node, dst_dir, target.name, path)
            except BaseException:
                # A failed rename changes neither name: the target (open, or temporary) is
                # put back as it was, and saved at its close as if nothing had happened; its
                # directory's times too.
                target.unlinked = False
                self.nodes[target.ino] = target
                set_child(dst_dir, target.name, target)
                dst_dir.mtime_ns, dst_dir.ctime_ns = times
                raise
            return
        self.save(node)  # an open, dirty source is saved first (temporary ones are not)
        data = bytes(node.file.data) if node.file is not None else self._content_of(node)
        stale = False
        if node.memory_id is not None:
            fold = bool(node.born) and time.monotonic() - node.born < FOLD_WINDOW_S
            memory = self.service.rename_over(
                mount.store_id, node.memory_id, target.memory_id, actor=self.actor, fold=fold
            )
            mount.count -= 1
            stale = memory.content_sha256 != node.sha256
        else:  # a temporary file, never saved: the target takes its bytes as a save would
            memory, created = self.service.save_file(
                mount.store_id,
                self.path(target),
                Content.from_bytes(data),
                memory_id=target.memory_id,
                actor=self.actor,
            )
            if created:  # the target was deleted elsewhere meanwhile: made again
                mount.count += 1
        # As on any filesystem, the source's inode now lives under the target's name (that is
        # what the kernel's caches already say); it carries the target's memory from here on.
        dst_dir = target.parent or self.root
        self._detach(target)
        self._move(node, dst_dir, target.name)
        self._apply_memory(node, memory)
        node.born = 0.0  # an old memory now: never folded into another
        if node.file is not None:
            node.file.dirty = False
            self._drop_clean_buffer(node)
        if stale:
            self._forget_shown(node)
        else:
            self._cache(node, data)

    @staticmethod
    def _may_replace(target: Node | None, name: str) -> None:
        """A directory renamed over ``target`` (None: the name is free) may replace it only
        if it is an empty directory."""
        if target is not None and not target.is_dir:
            raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
        if target is not None and target.children:
            raise FsError(errno.ENOTEMPTY, f"{name!r} is not empty")

    def _forget_shown(self, node: Node) -> None:
        """After a rename that found the file saved by another writer since this mount last
        looked (the store moved their bytes, not the ones shown here): the bytes shown go, and
        are read from the store again (an open buffer now, the kernel's pages at the next
        open). They stayed, under the new content's size, for good when the refresh took
        the rename for the last change and as ours."""
        self._content_bytes -= len(self._content.pop(node.ino, b""))
        node.stale_pages = True
        self.vanished.append(Invalidation("attrs", node.ino))
        if node.file is not None and not node.file.dirty:
            with suppress(FsError, MnemofsError):  # gone meanwhile: the next look says so
                node.file.data[:] = self._content_of(node)

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
        self._may_replace(target, new_name)
        self.save_all(under=node)
        # A save that found its memory moved elsewhere took the file there (``_follow``),
        # which may be the very name this directory is to take: then it is not free any more.
        target = dst_dir.children.get(new_name)
        self._may_replace(target, new_name)
        with suppress(NotFound):  # nothing under it was saved yet
            self.service.move_directory(mount.store_id, self.path(node), new_path, actor=self.actor)
            # Every memory under it has a new version the tree does not know yet: the next
            # look for changes reads them back (``RefreshMixin.adopt_own`` takes none as seen).
            self.in_step = False
        if target is not None:
            self._detach(target)
        self._move(node, dst_dir, new_name)
        # Each directory moved along is where the store moved its own, if it had one; one it
        # did not have (moved away elsewhere, unseen here) goes at the next look, once empty.
        stack = [node]
        while stack:
            directory = stack.pop()
            self.dirs_touched.add(directory)
            stack += [child for child in directory.children.values() if child.is_dir]
