"""Sync mode: each attached store as a plain local folder, reconciled with the database.

For sandboxes without FUSE. ``SyncWorker.reconcile`` compares three things per file: the
baseline (what both sides agreed on at the last reconcile, kept in a state file beside the
root), the local folder, and the store's changes since then (its change feed, so the cost
follows the changes, not the store's size; the local side is one ``stat`` per file, content
read only when the stat moved). Then, per path:

- changed on one side only: the change goes to the other side (an upload is a version by the
  session);
- changed on both sides to different content: the remote head stays the head, the local
  content is kept beside it as ``<name>.conflict-<version id><ext>`` (locally and as a memory);
- deleted locally: sent only once the file has stayed missing for a whole interval; a folder
  that lost every file at once is never taken for "delete everything" (refused, reported);
- moved locally (``mv``, a renamed directory): a new file with the content of a file that went
  missing is that memory moved, as a mount's rename is: it keeps its id and history;
- empty directories (a mount's ``mkdir``) are kept in step both ways too (``syncdirs.py``);
- a read_only store: local changes are undone from the store, and what was discarded is logged;
- a file the store refuses (size, UTF-8, name, count): stays local, reported once per change in
  the log and in ``<root>/.mnemofs-sync-errors``;
- a symbolic link (or a FIFO, a device) in the folder is never followed, read or replaced: it is
  reported like a refused file and left alone, and a memory whose path would go through one is
  not written (reported, tried again each pass). Every file access goes through ``Folder``
  (directory descriptors, ``O_NOFOLLOW``), so a link swapped in mid-pass changes nothing either.

Everything the worker writes is owner-only: files 0600 (0400 for a read_only store), folders
0700, the state and errors files 0600.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from mnemofs.backend import Backend
from mnemofs.content import Content
from mnemofs.errors import InvalidRequest, MnemofsError, NotFound
from mnemofs.folder import Folder, LinkInPath
from mnemofs.inotify import TreeWatch
from mnemofs.models import Attachment, Memory, MemoryId, Session
from mnemofs.paths import TEMP_NAME, parent_prefix
from mnemofs.private import FILE_MODE, private_dir, write_private
from mnemofs.syncdirs import reconcile_directories
from mnemofs.syncstate import (
    UNCHANGED,
    Entry,
    Moves,
    Report,
    StoreState,
    folder_lost,
    load_states,
    save_states,
    state_path,
)

log = logging.getLogger("mnemofs.sync")

ERRORS_FILE = ".mnemofs-sync-errors"
READ_ONLY_MODE = 0o400


def _folder_name(attachment: Attachment) -> str:
    """The store's folder under the root: the last part of its mount path (its slug)."""
    return attachment.mount_path.rsplit("/", 1)[1]


def conflict_name(path: str, version_id: str) -> str:
    directory, _, name = path.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    suffix = f".conflict-{version_id}" + (f".{ext}" if ext else "")
    return f"{directory}/{stem}{suffix}"


class SyncWorker:
    """Reconciles a session's stores with folders under ``root`` (see the module docstring)."""

    def __init__(
        self, service: Backend, session: Session, root: Path, *, interval: float = 15.0
    ) -> None:
        self.service = service
        self.session = session
        self.root = root
        self.interval = interval
        self.state_file = state_path(root)
        self.dirty = True  # the state file needs writing
        self.watching = False
        self.watches: dict[str, TreeWatch] = {}  # store id -> its folder's watch
        self.fresh: set[str] = set()  # stores whose watch is new: their next look is full
        # The baselines, and "store:path" -> the sha256 of what was reported.
        self.states, self.reported = load_states(
            self.state_file,
            session.id,
            {a.memory_store_id: _folder_name(a) for a in session.resources},
        )

    # -- one reconcile --------------------------------------------------------------------------

    def reconcile(self) -> Report:
        report = Report()
        private_dir(self.root, tighten=False)  # the caller's folder: made 0700, never changed
        for attachment in self.session.resources:
            folder = Folder(str(self.root), _folder_name(attachment))
            state = self.states.setdefault(
                attachment.memory_store_id, StoreState(folder=_folder_name(attachment))
            )
            try:
                if not state.files:  # a store's folder is there from the start, empty or not
                    folder.ensure()
                self._reconcile_store(attachment, folder, state, report)
            except MnemofsError as exc:
                report.errors.append(f"{attachment.name}: {exc.message}")
                log.warning("cannot sync store %r: %s", attachment.name, exc.message)
            except (LinkInPath, OSError) as exc:  # its folder is a link, or unusable
                report.errors.append(f"{attachment.name}: {folder.path}: {exc}")
                log.warning("cannot sync store %r: %s: %s", attachment.name, folder.path, exc)
            if self.dirty:
                save_states(self.state_file, self.session.id, self.states, self.reported)
                self.dirty = False
        self._write_errors(report)
        return report

    def _reconcile_store(
        self, attachment: Attachment, folder: Folder, state: StoreState, report: Report
    ) -> None:
        store_id = attachment.memory_store_id
        writable = attachment.access == "read_write"
        left = set(state.retry)
        remote, last_seq = self._remote_changes(store_id, state)
        for path in state.retry - set(remote):  # what the store has there now
            remote[path] = self._memory_at(store_id, path)
        known = set(state.files)
        hinted = self._local_hints(store_id)
        links: set[str] = set()
        dirs: list[str] | None = None
        if hinted is None:  # look at every file
            dirs = []
            local, refused = folder.scan(dirs=dirs)
            links.update(refused)
            paths = set(local) | set(remote) | known | links
            lost = bool(known) and folder_lost(folder, local, known)
        else:  # only what inotify saw change, what changed remotely, deletes on hold
            paths = hinted | set(remote) | set(state.missing_since)
            local = self._stat(folder, paths, links)
            lost = not folder.exists() or (known <= hinted and folder_lost(folder, local, known))
        paths |= state.retry
        local.update(self._stat(folder, state.retry - set(local) - links, links))
        if lost:
            message = (
                f"{folder.path} lost every one of its {len(known)} files at once; not "
                "deleting them from the store (restore the folder, or remove it and "
                f"{self.state_file.name} to start over)"
            )
            report.errors.append(message)
            log.error("%s", message)
            self.fresh.add(store_id)  # every file looked at again next time: said until mended
            return
        state.retry = set()
        had = (len(report.downloaded), len(report.deleted_local), set(state.directories))
        try:
            self._reconcile_paths(
                store_id, folder, state, paths, local, remote, links, writable, report
            )
            files = [*local, *report.downloaded[had[0] :]]
            scanned = None if dirs is None else (dirs, files)
            emptied = report.deleted_local[had[1] :]
            reconcile_directories(
                self.service, store_id, folder, state, scanned, emptied, links, writable, report
            )
        except BaseException:
            # Cut short (the database or server went away): what waited for a retry still
            # waits, and what inotify told of was drained, so the next look is a full one.
            state.retry |= left
            self.fresh.add(store_id)
            raise
        if state.last_seq != last_seq or state.retry != left or state.directories != had[2]:
            state.last_seq = last_seq
            self.dirty = True
        if self.watching and store_id not in self.watches:
            self._watch(store_id, folder.path)

    def _reconcile_paths(
        self,
        store_id: str,
        folder: Folder,
        state: StoreState,
        paths: set[str],
        local: dict[str, os.stat_result],
        remote: dict[str, Any],
        links: set[str],
        writable: bool,
        report: Report,
    ) -> None:
        """Each path in turn; one that changed or went mid-pass, or lies under a link, waits
        for the next pass (``state.retry``)."""
        now = time.time()
        moves = Moves(state, paths - set(local) if writable else set(), links, remote)
        for path in sorted(paths):
            try:
                if path in links or any(path.startswith(link + "/") for link in links):
                    raise LinkInPath(path)
                self._reconcile_path(
                    store_id,
                    folder,
                    state,
                    path,
                    local.get(path),
                    remote.get(path, UNCHANGED),
                    writable,
                    now,
                    report,
                    moves,
                )
            except LinkInPath as exc:
                state.retry.add(path)
                self._report(
                    f"{store_id}:{path}",
                    "link",
                    f"{path}: not synced: {exc.what} on the way (never followed)",
                    report,
                )
            except (NotFound, OSError) as exc:
                # Changed or gone on either side while we looked: only this path waits.
                state.retry.add(path)
                log.info("%s: left for the next pass (%s)", path, getattr(exc, "message", exc))

    # -- inotify: a long-running worker looks only at what changed locally ----------------------

    def watch_local_changes(self) -> None:
        """From now on, reconciles stat only the local files inotify saw change (and do a full
        look after anything inotify cannot describe: a new, moved or removed directory, an
        overflow). For a long-running worker; ``--once`` always looks at every file."""
        self.watching = True

    def _watch(self, store_id: str, folder: str) -> None:
        old = self.watches.pop(store_id, None)
        if old is not None:
            old.close()
        try:
            self.watches[store_id] = TreeWatch(folder)
        except OSError as exc:
            log.info("not watching %s (%s): every reconcile looks at every file", folder, exc)
            return
        self.fresh.add(store_id)  # edits made before the watch existed: one more full look

    def _local_hints(self, store_id: str) -> set[str] | None:
        """The local paths to look at, or None for all of them."""
        watch = self.watches.get(store_id)
        if watch is None:
            return None
        changed = watch.drain()
        if changed is None:  # the watch cannot describe what happened: a new one after this
            watch.close()
            del self.watches[store_id]
            return None
        if store_id in self.fresh:
            self.fresh.discard(store_id)
            return None
        return {p for p in changed if not _skipped(p.rsplit("/", 1)[1])}

    @staticmethod
    def _stat(folder: Folder, paths: set[str], links: set[str]) -> dict[str, os.stat_result]:
        """The regular files among ``paths``; links met on the way are added to ``links``."""
        found: dict[str, os.stat_result] = {}
        for path in paths:
            if _skipped(path.rsplit("/", 1)[1]):
                continue
            try:
                st = folder.stat(path)
            except LinkInPath:
                links.add(path)
                continue
            except OSError:
                continue
            if st is not None:
                found[path] = st
        return found

    def _memory_at(self, store_id: str, path: str) -> Memory | None:
        """The memory at ``path`` now, or None if there is none (a local name that is no
        valid store path has none either). A database that cannot answer is not "none": that
        would delete the local copy; it fails the store's pass like any other database error."""
        try:
            return self.service.find_memory(store_id, path, count_access=False)
        except (NotFound, InvalidRequest):
            return None

    def _remote_changes(self, store_id: str, state: StoreState) -> tuple[dict[str, Any], int]:
        """Path -> the memory now there (or None: gone), for what changed since last time."""
        out: dict[str, Any] = {}
        if state.last_seq == 0 and not state.files:
            snap = self.service.snapshot(store_id)
            out.update((m.path, m) for m in snap.memories)
            return out, snap.last_seq
        changes = self.service.changes(store_id, state.last_seq, limit=1_000_000)
        if not changes:
            return out, state.last_seq
        last = changes[-1].seq
        newest = {c.version.memory_id: c.version.id for c in changes}  # later ones win
        by_id = {entry.memory_id: path for path, entry in state.files.items()}
        news: list[MemoryId] = []
        for memory_id, version_id in newest.items():
            old = by_id.get(memory_id)
            if old is None or state.files[old].version_id != version_id:
                news.append(memory_id)  # not the version we wrote or brought down ourselves
        try:
            found = self.service.get_memories(store_id, news)  # one read (request) for all
        except NotFound:  # the store is gone: so is every memory of it
            found = {}
        for memory_id in news:
            old = by_id.get(memory_id)
            memory: Memory | None = found.get(memory_id)
            if (
                memory is not None
                and old == memory.path
                and state.files[old].version_id == memory.memory_version_id
            ):
                continue  # our own upload, or already brought down: nothing new
            if old is not None and (memory is None or memory.path != old):
                out.setdefault(old, None)  # gone from its old path
            if memory is not None:
                out[memory.path] = memory
        return out, last

    # -- one path -------------------------------------------------------------------------------

    def _reconcile_path(
        self,
        store_id: str,
        folder: Folder,
        state: StoreState,
        path: str,
        st: os.stat_result | None,
        remote: Any,
        writable: bool,
        now: float,
        report: Report,
        moves: Moves,
    ) -> None:
        base = state.files.get(path)
        if remote is UNCHANGED and st is not None and base is not None and base.unmoved(st):
            return  # the common case, kept cheap: nothing moved on either side
        self.dirty = True
        # What the local side did since the baseline.
        data: bytes | None = None
        sha = ""
        if st is None:
            local = "missing" if base else "absent"
        elif base and base.unmoved(st):
            local = "same"
        else:
            data = folder.read(path)
            if data is None:
                return  # vanished while we looked: next time
            sha = hashlib.sha256(data).hexdigest()
            local = "same" if base and sha == base.sha256 else ("changed" if base else "new")
            if local == "same" and base:  # touched only: remember the new stat
                base.took(st)
        if local != "missing":
            state.missing_since.pop(path, None)
        # What the store did: UNCHANGED, None (gone) or the memory now at the path.
        if remote is UNCHANGED:
            if local == "same" or local == "absent":
                return
            if local == "missing":
                return self._local_delete(
                    store_id, folder, state, path, base, writable, now, report
                )
            assert data is not None
            if not writable:
                return self._discard(store_id, folder, state, path, base, report)
            source = moves.source(path, sha) if base is None else None
            if source is not None and self._move(store_id, folder, state, source, path, report):
                return
            return self._upload(store_id, folder, state, path, base, data, report)
        if remote is None:  # gone from the store
            if local in ("same", "missing", "absent"):
                state.files.pop(path, None)
                state.missing_since.pop(path, None)
                if local == "same":
                    folder.remove(path)
                    report.deleted_local.append(path)
                return
            assert data is not None
            state.files.pop(path, None)  # an edit of a memory deleted elsewhere: keep it
            if writable:
                return self._upload(store_id, folder, state, path, None, data, report)
            return self._discard(store_id, folder, state, path, None, report)
        memory: Memory = remote
        if local in ("same", "missing", "absent"):
            return self._download(store_id, folder, state, memory, report)
        assert data is not None
        if hashlib.sha256(data).hexdigest() == memory.content_sha256:
            assert st is not None
            return self._remember(state, memory, st)  # both sides agree already
        if not writable:
            return self._download(store_id, folder, state, memory, report)
        # Both sides changed: the store's head stays; the local content goes beside it.
        side = conflict_name(path, memory.memory_version_id)
        folder.write(side, data)
        report.conflicts.append(path)
        log.warning("%s changed on both sides: local copy kept as %s", path, side)
        self._upload(store_id, folder, state, side, None, data, report)
        self._download(store_id, folder, state, memory, report)

    # -- the actions ----------------------------------------------------------------------------

    def _move(
        self,
        store_id: str,
        folder: Folder,
        state: StoreState,
        source: str,
        path: str,
        report: Report,
    ) -> bool:
        """``source``'s memory moved to ``path`` (a ``modified`` version, as a mount's rename);
        False, changing nothing, if it changed or went meanwhile or ``path`` is taken."""
        base = state.files.get(source)
        if base is None:  # deleted earlier in this pass: its hold had ended
            return False
        try:
            memory = self.service.update_memory(
                store_id,
                base.memory_id,
                path=path,
                precondition={"type": "content_sha256", "content_sha256": base.sha256},
                keep_directory=folder.exists(parent_prefix(source)),
            )
        except MnemofsError as exc:
            log.info("%s: not taken for a move of %s (%s)", path, source, exc.message)
            return False
        state.files.pop(source, None)
        state.missing_since.pop(source, None)
        report.moved.append(f"{source} -> {path}")
        st = folder.stat(path)
        if st is None:
            raise FileNotFoundError(path)  # gone since it was read: the next pass sees to it
        self._remember(state, memory, st)
        return True

    def _upload(
        self,
        store_id: str,
        folder: Folder,
        state: StoreState,
        path: str,
        base: Entry | None,
        data: bytes,
        report: Report,
    ) -> None:
        try:
            known = base.memory_id if base else None
            text = Content.from_bytes(data)
            memory, _ = self.service.save_file(store_id, path, text, memory_id=known)
        except MnemofsError as exc:
            self._report(
                f"{store_id}:{path}",
                hashlib.sha256(data).hexdigest(),
                f"{path}: not uploaded: {exc.message}",
                report,
            )
            return
        self.reported.pop(f"{store_id}:{path}", None)
        report.uploaded.append(path)
        st = folder.stat(path)
        if st is None:
            raise FileNotFoundError(path)  # gone since it was read: the next pass sees to it
        self._remember(state, memory, st)

    def _download(
        self, store_id: str, folder: Folder, state: StoreState, memory: Memory, report: Report
    ) -> None:
        if memory.content is None:
            memory = self.service.get_memory(store_id, memory.id, count_access=False)
        writable = any(
            a.memory_store_id == store_id and a.access == "read_write"
            for a in self.session.resources
        )
        st = folder.write(
            memory.path,
            (memory.content or "").encode(),
            mode=FILE_MODE if writable else READ_ONLY_MODE,
        )
        report.downloaded.append(memory.path)
        self.reported.pop(f"{store_id}:{memory.path}", None)
        self._remember(state, memory, st)

    @staticmethod
    def _remember(state: StoreState, memory: Memory, st: os.stat_result) -> None:
        entry = Entry(memory.id, memory.memory_version_id, memory.content_sha256, 0, 0)
        entry.took(st)
        state.files[memory.path] = entry
        state.missing_since.pop(memory.path, None)

    def _local_delete(
        self,
        store_id: str,
        folder: Folder,
        state: StoreState,
        path: str,
        base: Entry | None,
        writable: bool,
        now: float,
        report: Report,
    ) -> None:
        assert base is not None
        if not writable:
            memory = self.service.get_memory(store_id, base.memory_id, count_access=False)
            report.discarded.append(path)
            log.warning("restored %s: the store is read_only (local delete discarded)", path)
            return self._download(store_id, folder, state, memory, report)
        since = state.missing_since.setdefault(path, now)
        if now - since < self.interval:
            return  # on hold: only a file missing for a whole interval is deleted
        with contextlib.suppress(NotFound):
            # The last memory's directory stays in the store while the folder has it (`rm`),
            # not once the folder's is gone too (`rm -r`, `mv` of the directory).
            here = folder.exists(parent_prefix(path))
            self.service.delete_memory(store_id, base.memory_id, keep_directory=here)
        state.files.pop(path, None)
        state.missing_since.pop(path, None)
        report.deleted_remote.append(path)

    def _discard(
        self,
        store_id: str,
        folder: Folder,
        state: StoreState,
        path: str,
        base: Entry | None,
        report: Report,
    ) -> None:
        report.discarded.append(path)
        if base is None:
            log.warning("discarded %s: the store is read_only", path)
            folder.remove(path)
            return
        log.warning("restored %s: the store is read_only (local change discarded)", path)
        memory = self.service.get_memory(store_id, base.memory_id, count_access=False)
        self._download(store_id, folder, state, memory, report)

    def _report(self, key: str, sha: str, line: str, report: Report) -> None:
        """A file that cannot be synced: in this pass's errors, and in the log once per change."""
        line = _shown(line)
        report.errors.append(line)
        if self.reported.get(key) != sha:  # once per change of the file
            self.reported[key] = sha
            log.warning("%s", line)

    def _write_errors(self, report: Report) -> None:
        target = self.root / ERRORS_FILE
        if report.errors:
            text = "".join(line + "\n" for line in report.errors)
            write_private(target, text.encode("utf-8", "backslashreplace"))  # never a crash
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()  # unlink never follows a link at the name itself


def _skipped(name: str) -> bool:
    """Temporary files of editors and tools, and the worker's own files, are never synced."""
    return name.startswith(".mnemofs") or bool(TEMP_NAME.match(name))


def _shown(text: str) -> str:
    """``text`` as a person can read it: the bytes of a local file name that are not UTF-8
    (which Python keeps as lone surrogates) as ``\\xff``, so the line can be logged and written
    (a file named so was refused, and the report of it stopped the whole worker)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return raw.decode("utf-8", "backslashreplace")
