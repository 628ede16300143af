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
- a read_only store: local changes are undone from the store, and what was discarded is logged;
- a file the store refuses (size, UTF-8, name, count): stays local, reported once per change in
  the log and in ``<root>/.mnemofs-sync-errors``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemofs.errors import MnemofsError, NotFound
from mnemofs.inotify import TreeWatch
from mnemofs.models import Attachment, Memory, Session
from mnemofs.paths import TEMP_NAME
from mnemofs.store import MemoryService, decode_content

log = logging.getLogger("mnemofs.sync")

ERRORS_FILE = ".mnemofs-sync-errors"
STATE_FORMAT = 2


@dataclass
class Entry:
    """One file as both sides last agreed on it."""

    memory_id: str
    version_id: str
    sha256: str
    mtime_ns: int
    size: int


@dataclass
class StoreState:
    last_seq: int = 0
    files: dict[str, Entry] = field(default_factory=dict)  # store path -> entry
    missing_since: dict[str, float] = field(default_factory=dict)  # local deletes on hold
    retry: set[str] = field(default_factory=set)  # paths a pass could not finish: look again


@dataclass
class Report:
    uploaded: list[str] = field(default_factory=list)
    downloaded: list[str] = field(default_factory=list)
    deleted_remote: list[str] = field(default_factory=list)
    deleted_local: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def state_path(root: Path) -> Path:
    """The state file beside the root (never inside it, where the agent works)."""
    return root.parent / f".{root.name}.mnemofs-sync.json"


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
        self, service: MemoryService, session: Session, root: Path, *, interval: float = 15.0
    ) -> None:
        self.service = service
        self.session = session
        self.root = root
        self.interval = interval
        self.state_file = state_path(root)
        self.states: dict[str, StoreState] = {}
        self.dirty = True  # the state file needs writing
        self.watching = False
        self.watches: dict[str, TreeWatch] = {}  # store id -> its folder's watch
        self.fresh: set[str] = set()  # stores whose watch is new: their next look is full
        self.reported: dict[str, str] = {}  # "store:path" -> sha256 of what was reported
        self._load()

    # -- state --------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            raw = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        if raw.get("format") != STATE_FORMAT or raw.get("session") != self.session.id:
            return  # another session's or an older format: start over from the stores
        self.reported = dict(raw.get("reported", {}))
        for store_id, data in raw.get("stores", {}).items():
            self.states[store_id] = StoreState(
                last_seq=int(data.get("last_seq", 0)),
                files={p: Entry(*e) for p, e in data.get("files", {}).items()},
                missing_since=dict(data.get("missing_since", {})),
            )

    def _save(self) -> None:
        data = {
            "format": STATE_FORMAT,
            "session": self.session.id,
            "reported": self.reported,  # so a restart does not report the same file again
            "stores": {
                sid: {"last_seq": st.last_seq,
                      "files": {p: [e.memory_id, e.version_id, e.sha256, e.mtime_ns, e.size]
                                for p, e in st.files.items()},
                      "missing_since": st.missing_since}
                for sid, st in self.states.items()
            },
        }  # fmt: skip
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_file)

    # -- one reconcile --------------------------------------------------------------------------

    def reconcile(self) -> Report:
        report = Report()
        self.root.mkdir(parents=True, exist_ok=True)
        for attachment in self.session.resources:
            folder = self.root / attachment.mount_path.rsplit("/", 1)[1]
            state = self.states.setdefault(attachment.memory_store_id, StoreState())
            try:
                self._reconcile_store(attachment, folder, state, report)
            except MnemofsError as exc:
                report.errors.append(f"{attachment.name}: {exc.message}")
                log.warning("cannot sync store %r: %s", attachment.name, exc.message)
            if self.dirty:
                self._save()
                self.dirty = False
        self._write_errors(report)
        return report

    def _reconcile_store(
        self, attachment: Attachment, folder: Path, state: StoreState, report: Report
    ) -> None:
        store_id = attachment.memory_store_id
        writable = attachment.access == "read_write"
        remote, last_seq = self._remote_changes(store_id, state)
        known = set(state.files)
        hinted = self._local_hints(store_id)
        if hinted is None:  # look at every file
            local = self._scan(folder)
            paths = set(local) | set(remote) | known
            lost = bool(known) and folder_lost(folder, local, known)
        else:  # only what inotify saw change, what changed remotely, deletes on hold
            paths = hinted | set(remote) | set(state.missing_since)
            local = self._stat(folder, paths)
            lost = not folder.is_dir() or (len(known) > 1 and known <= hinted
                                           and not (set(local) & known))  # fmt: skip
        if lost:
            message = (f"{folder} lost every one of its {len(known)} files at once; not "
                       "deleting them from the store (restore the folder, or remove it and "
                       f"{self.state_file.name} to start over)")  # fmt: skip
            report.errors.append(message)
            log.error("%s", message)
            return
        if state.retry:
            paths |= state.retry
            local.update(self._stat(folder, state.retry - set(local)))
        state.retry = set()
        now = time.time()
        for path in sorted(paths):
            try:
                self._reconcile_path(store_id, folder, state, path, local.get(path),
                                     remote.get(path, _UNCHANGED), writable, now,
                                     report)  # fmt: skip
            except (NotFound, OSError) as exc:
                # Changed or gone on either side while we looked: only this path waits, and the
                # store's changes since the last pass are read again next time.
                state.retry.add(path)
                log.info("%s: left for the next pass (%s)", path, getattr(exc, "message", exc))
        if not state.retry and state.last_seq != last_seq:
            state.last_seq = last_seq
            self.dirty = True
        if self.watching and store_id not in self.watches:
            self._watch(store_id, folder)

    # -- inotify: a long-running worker looks only at what changed locally ----------------------

    def watch_local_changes(self) -> None:
        """From now on, reconciles stat only the local files inotify saw change (and do a full
        look after anything inotify cannot describe: a new, moved or removed directory, an
        overflow). For a long-running worker; ``--once`` always looks at every file."""
        self.watching = True

    def _watch(self, store_id: str, folder: Path) -> None:
        old = self.watches.pop(store_id, None)
        if old is not None:
            old.close()
        try:
            self.watches[store_id] = TreeWatch(str(folder))
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
    def _stat(folder: Path, paths: set[str]) -> dict[str, os.stat_result]:
        found: dict[str, os.stat_result] = {}
        for path in paths:
            if _skipped(path.rsplit("/", 1)[1]):
                continue
            try:
                st = os.stat(os.path.join(folder, path.lstrip("/")), follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[path] = st
        return found

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
        for memory_id, version_id in newest.items():
            old = by_id.get(memory_id)
            if old is not None and state.files[old].version_id == version_id:
                continue  # the version we wrote or brought down ourselves: no query needed
            try:
                memory: Memory | None = self.service.get_memory(
                    store_id, memory_id, count_access=False
                )
            except NotFound:
                memory = None
            if (
                memory is not None
                and old == memory.path
                and state.files[old].version_id == memory.version_id
            ):
                continue  # our own upload, or already brought down: nothing new
            if old is not None and (memory is None or memory.path != old):
                out.setdefault(old, None)  # gone from its old path
            if memory is not None:
                out[memory.path] = memory
        return out, last

    @staticmethod
    def _scan(folder: Path) -> dict[str, os.stat_result]:
        """Store path -> stat of every local file (one stat each; content is read later, only
        for files whose stat moved)."""
        found: dict[str, os.stat_result] = {}
        pending = [(str(folder), "")]
        while pending:
            directory, prefix = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                name = entry.name
                if name.startswith(".mnemofs"):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, f"{prefix}/{name}"))
                elif not _skipped(name):
                    with contextlib.suppress(OSError):
                        found[f"{prefix}/{name}"] = entry.stat(follow_symlinks=False)
        return found

    # -- one path -------------------------------------------------------------------------------

    def _reconcile_path(
        self,
        store_id: str,
        folder: Path,
        state: StoreState,
        path: str,
        st: os.stat_result | None,
        remote: Any,
        writable: bool,
        now: float,
        report: Report,
    ) -> None:
        base = state.files.get(path)
        if (
            remote is _UNCHANGED
            and st is not None
            and base is not None
            and st.st_mtime_ns == base.mtime_ns
            and st.st_size == base.size
        ):
            return  # the common case, kept cheap: nothing moved on either side
        self.dirty = True
        target = folder / path.lstrip("/")
        # What the local side did since the baseline.
        data: bytes | None = None
        if st is None:
            local = "missing" if base else "absent"
        elif base and (st.st_mtime_ns, st.st_size) == (base.mtime_ns, base.size):
            local = "same"
        else:
            data = _read(target)
            if data is None:
                return  # vanished while we looked: next time
            sha = hashlib.sha256(data).hexdigest()
            local = "same" if base and sha == base.sha256 else ("changed" if base else "new")
            if local == "same" and base:  # touched only: remember the new stat
                base.mtime_ns, base.size = st.st_mtime_ns, st.st_size
        if local != "missing":
            state.missing_since.pop(path, None)
        # What the store did: _UNCHANGED, None (gone) or the memory now at the path.
        if remote is _UNCHANGED:
            if local == "same" or local == "absent":
                return
            if local == "missing":
                return self._local_delete(store_id, folder, state, path, base, writable, now,
                                          report)  # fmt: skip
            assert data is not None
            if not writable:
                return self._discard(store_id, folder, state, path, base, report)
            return self._upload(store_id, folder, state, path, base, data, report)
        if remote is None:  # gone from the store
            if local in ("same", "missing", "absent"):
                state.files.pop(path, None)
                state.missing_since.pop(path, None)
                if local == "same":
                    with contextlib.suppress(OSError):
                        _make_writable(target)
                        target.unlink()
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
            return self._remember(folder, state, memory)  # both sides agree already
        if not writable:
            return self._download(store_id, folder, state, memory, report)
        # Both sides changed: the store's head stays; the local content goes beside it.
        side = conflict_name(path, memory.version_id)
        (folder / side.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (folder / side.lstrip("/")).write_bytes(data)
        report.conflicts.append(path)
        log.warning("%s changed on both sides: local copy kept as %s", path, side)
        self._upload(store_id, folder, state, side, None, data, report)
        self._download(store_id, folder, state, memory, report)

    # -- the actions ----------------------------------------------------------------------------

    def _upload(self, store_id: str, folder: Path, state: StoreState, path: str,
                base: Entry | None, data: bytes, report: Report) -> None:  # fmt: skip
        try:
            known = base.memory_id if base else None
            text = decode_content(data)
            memory, _ = self.service.save_file(store_id, path, text, memory_id=known)
        except MnemofsError as exc:
            self._report(f"{store_id}:{path}", path, hashlib.sha256(data).hexdigest(),
                         exc.message, report)  # fmt: skip
            return
        self.reported.pop(f"{store_id}:{path}", None)
        report.uploaded.append(path)
        self._remember(folder, state, memory)

    def _download(self, store_id: str, folder: Path, state: StoreState, memory: Memory,
                  report: Report) -> None:  # fmt: skip
        if memory.content is None:
            memory = self.service.get_memory(store_id, memory.id, count_access=False)
        target = folder / memory.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".mnemofs-{target.name}.tmp")
        tmp.write_bytes((memory.content or "").encode())
        if target.exists():
            _make_writable(target)
        os.replace(tmp, target)
        report.downloaded.append(memory.path)
        self._remember(folder, state, memory)

    def _remember(self, folder: Path, state: StoreState, memory: Memory) -> None:
        target = folder / memory.path.lstrip("/")
        writable = any(a.memory_store_id == memory.memory_store_id and a.access == "read_write"
                       for a in self.session.resources)  # fmt: skip
        if not writable:
            with contextlib.suppress(OSError):
                target.chmod(0o444)
        st = target.stat()
        state.files[memory.path] = Entry(memory.id, memory.version_id, memory.content_sha256,
                                         st.st_mtime_ns, st.st_size)  # fmt: skip
        state.missing_since.pop(memory.path, None)

    def _local_delete(self, store_id: str, folder: Path, state: StoreState, path: str,
                      base: Entry | None, writable: bool, now: float,
                      report: Report) -> None:  # fmt: skip
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
            self.service.delete_memory(store_id, base.memory_id, keep_directory=True)
        state.files.pop(path, None)
        state.missing_since.pop(path, None)
        report.deleted_remote.append(path)

    def _discard(self, store_id: str, folder: Path, state: StoreState, path: str,
                 base: Entry | None, report: Report) -> None:  # fmt: skip
        target = folder / path.lstrip("/")
        report.discarded.append(path)
        if base is None:
            log.warning("discarded %s: the store is read_only", path)
            with contextlib.suppress(OSError):
                target.unlink()
            return
        log.warning("restored %s: the store is read_only (local change discarded)", path)
        memory = self.service.get_memory(store_id, base.memory_id, count_access=False)
        self._download(store_id, folder, state, memory, report)

    def _report(self, key: str, path: str, sha: str, message: str, report: Report) -> None:
        line = f"{path}: not uploaded: {message}"
        report.errors.append(line)
        if self.reported.get(key) != sha:  # once per change of the file
            self.reported[key] = sha
            log.warning("%s", line)

    def _write_errors(self, report: Report) -> None:
        target = self.root / ERRORS_FILE
        if report.errors:
            target.write_text("".join(line + "\n" for line in report.errors))
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()


class _Unchanged:
    def __repr__(self) -> str:
        return "unchanged"


_UNCHANGED: Any = _Unchanged()


def folder_lost(folder: Path, local: dict[str, os.stat_result], known: set[str]) -> bool:
    """Did the folder lose every file the baseline knows, all at once?"""
    return not folder.is_dir() or (len(known) > 1 and not (set(local) & known))


def _skipped(name: str) -> bool:
    """Temporary files of editors and tools, and the worker's own files, are never synced."""
    return name.startswith(".mnemofs") or bool(TEMP_NAME.match(name))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _make_writable(path: Path) -> None:
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) | stat.S_IWUSR)
