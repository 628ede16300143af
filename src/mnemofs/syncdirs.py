"""Empty directories in sync mode (``sync.py``). A store keeps a directory of its own when a
mount makes one (``mkdir``) or when an ``rm`` of a directory's last file keeps it; a directory
holding files needs none, its files imply it. The sync worker keeps those directories and the
folder's empty ones in step as it keeps files, against what both sides last agreed on
(``StoreState.directories``):

- in the store, not in the folder: new in the store, it is made in the folder; agreed before,
  the folder removed it, so the store does (once the files under it are gone too: until then
  the store refuses, and the next pass asks again);
- in the folder with no file below it, not in the store: new in the folder, the store makes
  it; agreed before, the store removed it, so the folder does if it is empty.

A directory the worker emptied (the store deleted its last file) goes too, unless the store
keeps it: a mount no longer shows it either. A read_only store's directories are made in the
folder and never changed in the store. A directory the store refuses (a bad name, a full
store) is reported, and asked again at every full look.
"""

from __future__ import annotations

from collections.abc import Iterable

from mnemofs.backend import Backend
from mnemofs.errors import Conflict, MnemofsError, NotFound
from mnemofs.folder import Folder, LinkInPath
from mnemofs.paths import ancestor_prefixes, parent_prefix
from mnemofs.syncstate import Report, StoreState


def reconcile_directories(
    service: Backend,
    store_id: str,
    folder: Folder,
    state: StoreState,
    scanned: tuple[list[str], Iterable[str]] | None,
    emptied: list[str],
    links: set[str],
    writable: bool,
    report: Report,
) -> None:
    """One pass over the directories, after the files' (see the module docstring).
    ``scanned``: the folder's directories and files as a full look found them, or None when
    only inotify's changes were looked at (the folder's directories did not change: making,
    moving or removing one brings a full look). ``emptied``: the files this pass removed from
    the folder because the store deleted them. ``links``: what the look found that is never
    followed; a directory that is one, or is under one, is neither removed nor made."""
    stored = set(service.explicit_directories(store_id))
    agreed = state.directories
    pruned = _prune(folder, emptied, stored)
    report.directories_removed.extend(pruned)
    if scanned is None:
        local: set[str] | None = None
        empty: set[str] = set()
        wanted = (stored ^ agreed) | state.removing
    else:
        found, files = scanned
        local = {d + "/" for d in found} - set(pruned)
        # Only the innermost, with nothing in it: the store takes a directory holding another
        # as implied, as by a file. (Their parents only: ~3 ms for 10,000 files, not ~15.)
        empty = local - {parent_prefix(p) for p in [*files, *local]}
        wanted = stored | agreed | empty
    for prefix in sorted(wanted, reverse=True):  # a directory before the one it is in
        try:
            if any(prefix.startswith(link + "/") for link in links):
                raise LinkInPath(prefix.rstrip("/"))
            here = folder.is_directory(prefix) if local is None else prefix in local
            done = _reconcile(
                service, store_id, folder, agreed, prefix, here, stored, empty, writable
            )
        except LinkInPath as exc:
            report.errors.append(f"{prefix}: not synced: {exc.what} on the way (never followed)")
            continue
        except (MnemofsError, OSError) as exc:
            report.errors.append(f"{prefix}: not synced: {getattr(exc, 'message', exc)}")
            continue
        if done == "made":
            report.directories_made.append(prefix)
        elif done == "removed":
            report.directories_removed.append(prefix)
        if done == "waiting":
            state.removing.add(prefix)
        else:
            state.removing.discard(prefix)
    state.directories = agreed & stored


def _reconcile(
    service: Backend,
    store_id: str,
    folder: Folder,
    agreed: set[str],
    prefix: str,
    here: bool,
    stored: set[str],
    empty: set[str],
    writable: bool,
) -> str | None:
    """What became of one directory: "made" or "removed" (on either side), "waiting" (to be
    removed from the store once the files under it are), or None."""
    if prefix in stored:
        if here:
            agreed.add(prefix)
            return None
        if prefix in agreed and writable:  # removed from the folder
            try:
                service.remove_directory(store_id, prefix)
            except Conflict:
                return "waiting"  # files under it are still in the store (their deletes wait)
            except NotFound:
                pass
            agreed.discard(prefix)
            stored.discard(prefix)
            return "removed"
        folder.make_directory(prefix)  # new in the store (or a read_only store's, restored)
        agreed.add(prefix)
        return "made"
    if not here:
        agreed.discard(prefix)
        return None
    if prefix in agreed:  # removed from the store
        agreed.discard(prefix)
        return "removed" if folder.remove_directory(prefix) else None
    if prefix in empty and writable:  # new in the folder
        try:
            service.make_directory(store_id, prefix)
        except Conflict:
            return None  # the store holds files there still (their deletes wait): it has it
        stored.add(prefix)
        agreed.add(prefix)
        return "made"
    return None


def _prune(folder: Folder, emptied: list[str], stored: set[str]) -> list[str]:
    """The folder's directories left empty by the files this pass removed (the store deleted
    them), removed unless the store keeps them; deepest first."""
    removed: list[str] = []
    for prefix in sorted({p for f in emptied for p in ancestor_prefixes(f)}, reverse=True):
        if prefix not in stored and folder.remove_directory(prefix):
            removed.append(prefix)
    return removed
