"""A folder of text files into a store (issue 18): one transaction, a verdict per file.

The caller walks the folder and hands over each file's store path and bytes (or why it could
not be read); this decides, under the store's lock, what each one becomes: ``created``,
``modified`` (its content differs from the memory at that path), ``unchanged``, or
``skipped`` with the reason the store would refuse it (not UTF-8 text, too large, a name the
path rules refuse, the store full, a credential under the secrets policy, a file where a
directory is). A skipped file changes nothing; the others are written in the same
transaction, so a run is all or nothing, and a dry run is the same run rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import MnemofsError, PathConflict
from mnemofs.paths import validate_path
from mnemofs.store import eviction
from mnemofs.store.base import ServiceBase
from mnemofs.store.directories import directories_full, directories_kept
from mnemofs.store.rows import (
    _MEMORY_COLS,
    _screen,
    utc_now,
)
from mnemofs.store.texts import _MEMORY_CONTENT
from mnemofs.store.tx import Tx

Verdict = Literal["created", "modified", "unchanged", "skipped"]


@dataclass(frozen=True, slots=True)
class FileIn:
    """One file of the folder: its store path and bytes, or why it could not be read.
    ``directory``: an empty directory to keep (``data`` unused)."""

    path: str
    data: bytes | None = None
    problem: str | None = None
    directory: bool = False


@dataclass(frozen=True, slots=True)
class FileOut:
    path: str
    verdict: Verdict
    reason: str = ""


class _DryRun(Exception):
    def __init__(self, outcomes: list[FileOut]) -> None:
        super().__init__("dry run")
        self.outcomes = outcomes


class FoldersMixin(ServiceBase):
    """Folder import."""

    def import_files(
        self,
        store_id: str,
        files: Callable[[], Iterable[FileIn]],
        *,
        dry_run: bool = False,
        actor: str | None = None,
    ) -> list[FileOut]:
        """Save each file of ``files()`` (called again if the transaction is retried) as
        a memory of ``store_id``; see the module docstring."""

        def run(tx: Tx) -> list[FileOut]:
            policy = self._change_store(tx, store_id, may_create=True)
            count = policy.memory_count
            cap = limits.MAX_MEMORIES_PER_STORE
            if policy.max_memories is not None:
                cap = policy.max_memories
            outcomes: list[FileOut] = []
            created = 0
            kept: list[int] = []  # the store's directories, counted at the first one's turn
            for item in files():
                try:
                    if item.problem is not None:
                        raise _Skip(item.problem)
                    if item.directory:
                        outcomes.append(self._keep_folder(tx, store_id, item.path, kept))
                        continue
                    path = validate_path(item.path)
                    content = Content.from_bytes(item.data or b"")
                    row = tx.one(
                        f"SELECT {_MEMORY_COLS}, {_MEMORY_CONTENT} FROM memories "
                        "WHERE store_id = :store AND path = :path",
                        {"store": store_id, "path": path},
                    )
                    if row is not None:
                        if row.content_sha256 == content.sha256:
                            outcomes.append(FileOut(path, "unchanged"))
                            continue
                        _screen(policy, store_id, path, content.text, row.content)
                        self._apply_update(tx, store_id, row, path, content, actor)
                        outcomes.append(FileOut(path, "modified"))
                        continue
                    if count + created >= cap:
                        raise _Skip(f"the store is full ({cap:,} memories)")
                    if policy.pool_id is not None:  # the pool decides (and may evict)
                        eviction.pool_room(self, tx, policy.pool_id, path, adding=created + 1)
                    self._path_check(tx, store_id, path)()
                    _screen(policy, store_id, path, content.text)
                    self._insert_memory(tx, store_id, path, content, actor)
                    created += 1
                    outcomes.append(FileOut(path, "created"))
                except _Skip as skip:
                    outcomes.append(FileOut(item.path, "skipped", str(skip)))
                except MnemofsError as exc:
                    outcomes.append(FileOut(item.path, "skipped", exc.message))
            if created:
                tx.run(
                    "UPDATE memory_stores SET memory_count = memory_count + :n WHERE id = :id",
                    {"n": created, "id": store_id},
                )
            if dry_run:
                raise _DryRun(outcomes)
            return outcomes

        try:
            outcomes: list[FileOut] = self.db.run(run, write=True)
        except _DryRun as dry:
            return dry.outcomes
        self.search_trail.wrote()
        return outcomes

    def _keep_folder(self, tx: Tx, store_id: str, path: str, kept: list[int]) -> FileOut:
        """An empty directory of the folder: an explicit directory of the store, if it has
        room for one more (``kept``: how many it keeps, once counted)."""
        path = validate_path(path)
        prefix = path + "/"
        if tx.scalar(
            "SELECT 1 FROM directories WHERE store_id = :store AND path = :path",
            {"store": store_id, "path": prefix},
        ):
            return FileOut(prefix, "unchanged")
        try:
            self._path_check(tx, store_id, path)()
        except PathConflict as exc:
            if "is a directory" in exc.message:  # memories under it already: nothing to keep
                return FileOut(prefix, "unchanged")
            raise
        if not kept:
            kept.append(directories_kept(tx, store_id))
        if kept[0] >= limits.MAX_DIRECTORIES_PER_STORE:
            raise directories_full(store_id, prefix)
        kept[0] += 1
        tx.run(
            "INSERT INTO directories (store_id, path, created_at) VALUES (:store, :path, :now)",
            {"store": store_id, "path": prefix, "now": utc_now()},
        )
        return FileOut(prefix, "created")


class _Skip(Exception):
    """A file the store will not take; the message says why."""
