"""What a sync worker keeps between passes (``sync.py``): per store, the baseline each file was
last agreed on, the local deletes on hold, the paths left for the next pass and the directories
both sides have (``syncdirs.py``); what a pass did; and, within a pass, what became of the
files the folder no longer holds: moved (where from), or all lost at once."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemofs.folder import Folder
from mnemofs.paths import basename
from mnemofs.private import write_private

STATE_FORMAT = 3  # 3: baselines are the folder's, per store (2: per session)


def state_path(root: Path) -> Path:
    """The state file beside the root (never inside it, where the agent works)."""
    return root.parent / f".{root.name}.mnemofs-sync.json"


# A file's stat taken this soon after its last change may not show the next one: timestamps
# come from a clock that ticks every few milliseconds (some filesystems keep whole seconds),
# so a rewrite of the same size in the same tick leaves the stat as it was.
RACY_NS = 2_000_000_000


@dataclass
class Entry:
    """One file as both sides last agreed on it, and its stat then."""

    memory_id: str
    version_id: str
    sha256: str
    mtime_ns: int
    size: int
    ino: int = 0  # 0 (a state file of before): read the file once to know
    ctime_ns: int = 0  # 0: taken too soon after a change (``RACY_NS``): read it next time

    def unmoved(self, st: os.stat_result) -> bool:
        """Is the file as it was, as far as its stat tells? Its inode and ctime tell what its
        size and mtime do not: another file renamed over it (``mv b f``, ``os.replace``),
        which keeps its own mtime and may have the same size; an edit that set the old mtime
        back (``cp -p``, ``tar``, ``touch -d``)."""
        stat = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        return stat == (self.mtime_ns, self.size, self.ino, self.ctime_ns)

    def took(self, st: os.stat_result) -> None:
        """Remember ``st`` as the file's stat, to be compared next time."""
        self.mtime_ns, self.size, self.ino = st.st_mtime_ns, st.st_size, st.st_ino
        self.ctime_ns = st.st_ctime_ns if time.time_ns() - st.st_ctime_ns >= RACY_NS else 0


@dataclass
class StoreState:
    last_seq: int = 0
    files: dict[str, Entry] = field(default_factory=dict)  # store path -> entry
    missing_since: dict[str, float] = field(default_factory=dict)  # local deletes on hold
    # Paths a pass could not finish (changed or gone mid-pass, or a link in the way): the next
    # pass looks at each again, locally and at the store, whatever the feed and inotify say.
    # Kept in the state file: the next pass may be the next `--once` run.
    retry: set[str] = field(default_factory=set)
    folder: str = ""  # the folder under the root this baseline is of (the store's slug)
    # The store's explicit directories the folder has too ("/a/b/"), as last agreed.
    directories: set[str] = field(default_factory=set)
    # Of those, the ones the folder removed that the store still holds files in: asked again
    # each pass (not kept in the state file: a worker's first pass is a full look).
    removing: set[str] = field(default_factory=set)


def load_states(
    file: Path, session_id: str, folders: dict[str, str]
) -> tuple[dict[str, StoreState], dict[str, str]]:
    """The baselines of the folder under a root (``file``: its ``state_path``), one per store,
    and what was reported (``"store:path"`` -> the sha256 reported), whichever session synced
    it last (``sync --attach ... --once`` from cron makes a new session each run, and must find
    what the last run agreed on). A store's baseline counts only for the same folder name
    (``folders``: store id -> this session's folder for it); a store that this session does
    not attach keeps its baseline for the next session that does."""
    states: dict[str, StoreState] = {}
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError):
        return states, {}
    if raw.get("format") not in (2, STATE_FORMAT):
        return states, {}  # an older format: start over from the stores
    if raw.get("format") == 2 and raw.get("session") != session_id:
        return states, {}  # format 2 did not record folders: only its own session can trust it
    for store_id, data in raw.get("stores", {}).items():
        folder = data.get("folder") if raw.get("format") == STATE_FORMAT else folders.get(store_id)
        if store_id in folders and folder != folders[store_id]:
            continue  # the store is synced into another folder now: no baseline there
        states[store_id] = StoreState(
            last_seq=int(data.get("last_seq", 0)),
            files={p: Entry(*e) for p, e in data.get("files", {}).items()},
            missing_since=dict(data.get("missing_since", {})),
            retry=set(data.get("retry", [])),
            directories=set(data.get("directories", [])),
            folder=folder or "",
        )
    return states, dict(raw.get("reported", {}))


def save_states(
    file: Path, session_id: str, states: dict[str, StoreState], reported: dict[str, str]
) -> None:
    data = {
        "format": STATE_FORMAT,
        "session": session_id,  # the last to sync here (informative)
        "reported": reported,  # so a restart does not report the same file again
        "stores": {
            sid: {
                "folder": st.folder,
                "last_seq": st.last_seq,
                "files": {
                    p: [e.memory_id, e.version_id, e.sha256, e.mtime_ns, e.size, e.ino, e.ctime_ns]
                    for p, e in st.files.items()
                },
                "missing_since": st.missing_since,
                "retry": sorted(st.retry),
                "directories": sorted(st.directories),
            }
            for sid, st in states.items()
        },
    }
    write_private(file, json.dumps(data).encode())


@dataclass
class Report:
    uploaded: list[str] = field(default_factory=list)
    downloaded: list[str] = field(default_factory=list)
    deleted_remote: list[str] = field(default_factory=list)
    deleted_local: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # "old -> new"
    directories_made: list[str] = field(default_factory=list)  # either side
    directories_removed: list[str] = field(default_factory=list)  # either side
    conflicts: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Unchanged:
    def __repr__(self) -> str:
        return "unchanged"


UNCHANGED: Any = Unchanged()


class Moves:
    """Where a new file in a pass may have been moved from: the files the baseline knows that
    are missing from the folder now, unchanged in the store, by content hash. A new file takes
    the one missing file with its content and its name (a renamed directory), else the one
    missing file with its content; where two or more could be it (empty files, copies) it is a
    new memory. A missing file is taken once."""

    def __init__(
        self, state: StoreState, missing: set[str], links: set[str], remote: dict[str, Any]
    ) -> None:
        self.missing: dict[str, list[str]] = {}
        for path in sorted(missing):
            entry = state.files.get(path)
            if entry is None or remote.get(path, UNCHANGED) is not UNCHANGED:
                continue
            if path in links or any(path.startswith(link + "/") for link in links):
                continue
            self.missing.setdefault(entry.sha256, []).append(path)

    def source(self, path: str, sha256: str) -> str | None:
        sources = self.missing.get(sha256)
        if not sources:
            return None
        named = [s for s in sources if basename(s) == basename(path)]
        if len(named) == 1:
            found = named[0]
        elif len(sources) == 1:
            found = sources[0]
        else:
            return None
        sources.remove(found)
        return found


def folder_lost(folder: Folder, local: dict[str, os.stat_result], known: set[str]) -> bool:
    """Did the folder lose every file the baseline knows, all at once, and hold no other file
    either (a wiped or unmounted folder)? A folder holding files the baseline does not know is
    alive: its files were moved (``mv *.md old/``), or replaced (two notes summed up in a new
    one, then deleted). ``local``: the files the pass found."""
    return not folder.exists() or (len(known) > 1 and not local)
