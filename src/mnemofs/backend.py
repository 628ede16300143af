"""What a mount and a sync worker need from where memories are kept: one interface, two
implementations that they cannot tell apart.

- ``mnemofs.store.MemoryService``: the database itself (SQLite or PostgreSQL).
- ``mnemofs.remote.RemoteBackend``: the HTTP API of ``mnemofs serve``, with a session token
  that reaches only that session's stores.

Every method is the store's (see ``MemoryService`` for what each promises); a refusal is the
same domain error from either (``mnemofs.errors``), so the filesystem's errnos do not depend on
the backend. ``Unavailable`` means "could not reach it; nothing known to have changed".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mnemofs.content import Content
from mnemofs.models import (
    Change,
    Memory,
    MemoryId,
    MemoryPrefix,
    MemoryVersion,
    PathHistory,
    Session,
    StoreId,
    StoreSnapshot,
    StoreState,
)


class ChangeSignal(Protocol):
    """Wakes a watcher: ``fileno()`` turns readable when stores may have changed; ``drain()``
    then names them (an empty set: look at every store). Having heard nothing for
    ``quiet_look_s``, the watcher looks anyway: a notice can be lost, a revision cannot."""

    quiet_look_s: float

    def fileno(self) -> int: ...

    def drain(self) -> set[str]: ...

    def heard_states(self) -> dict[StoreId, StoreState] | None:
        """Every store's state as the signal heard it since the last call, if it did (a remote
        mount's poll answers with them): the look needs not ask again. None: ask."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    # Whether a read of one memory is worth bringing others along (``get_memories``): every
    # call a request to a server. A mount's cold reads of a directory then read ahead.
    reads_along: bool

    # -- what there is ---------------------------------------------------------------------------
    def get_session(self, session_id: str) -> Session: ...

    def snapshot(self, store_id: str) -> StoreSnapshot: ...

    def store_states(self, store_ids: list[str]) -> dict[StoreId, StoreState]: ...

    def changes(self, store_id: str, after_seq: int, *, limit: int = 1000) -> list[Change]: ...

    def explicit_directories(self, store_id: str) -> list[str]: ...

    def path_history(self, store_id: str, path: str) -> PathHistory: ...

    def get_version(self, store_id: str, version_id: str) -> MemoryVersion: ...

    def get_memory(self, store_id: str, memory_id: str, *, count_access: bool = True) -> Memory: ...

    def get_memories(self, store_id: str, memory_ids: Sequence[str]) -> dict[MemoryId, Memory]: ...

    def find_memory(self, store_id: str, path: str, *, count_access: bool = True) -> Memory: ...

    def note_access(self, store_id: str, memory_id: str) -> None: ...

    def flush_accesses(self) -> None: ...

    # -- changes ---------------------------------------------------------------------------------
    def save_file(
        self,
        store_id: str,
        path: str,
        content: str | Content,
        *,
        memory_id: str | None = None,
        actor: str | None = None,
    ) -> tuple[Memory, bool]: ...

    def rename_over(
        self,
        store_id: str,
        source_id: str,
        target_id: str,
        *,
        actor: str | None = None,
        fold: bool = False,
    ) -> Memory: ...

    def take_back(
        self,
        store_id: str,
        memory_id: str,
        path: str,
        content: str | Content | None,
        *,
        backup_path: str,
        backup_sha256: str,
        source_id: str | None = None,
        fold: bool = False,
        actor: str | None = None,
    ) -> tuple[Memory, Memory]: ...

    def move_directory(
        self, store_id: str, old: str, new: str, *, actor: str | None = None
    ) -> int: ...

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | Content | None = None,
        path: str | None = None,
        precondition: dict[str, str] | str | None = None,
        actor: str | None = None,
        keep_directory: bool = False,
    ) -> Memory: ...

    def delete_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_content_sha256: str | None = None,
        actor: str | None = None,
        keep_directory: bool = False,
        archived_ok: bool = False,
    ) -> MemoryVersion: ...

    def make_directory(self, store_id: str, path: str) -> MemoryPrefix: ...

    def remove_directory(
        self, store_id: str, path: str, *, keep_directory: bool = False
    ) -> None: ...

    # -- keeping up and keeping well ---------------------------------------------------------------
    def listen_for_changes(self) -> ChangeSignal | None: ...

    def data_version(self) -> int | None: ...

    def own_since(
        self, store_ids: list[str], version: int | None
    ) -> dict[StoreId, tuple[StoreState, int]] | None: ...

    def own_moves(self, store_id: str, seen: int, now: int) -> int | None:
        """The store's feed end at revision ``now`` if every revision after ``seen`` was made
        by this backend's own changes (which the tree shows as it makes them), else None
        (moves.py: through a server; elsewhere always None)."""
        ...

    def commit_files(self) -> list[str]: ...

    def flush_to_disk(self) -> None: ...

    def checkpoint(self, *, force: bool = False) -> None: ...

    def checkpoint_due(self) -> bool: ...

    def upkeep_in(self) -> float | None: ...

    def defer_checkpoints(self) -> None: ...

    def defer_reconnects(self) -> None: ...

    def write_at_once(
        self, on: bool = True, *, again: bool = False, last: bool = False
    ) -> None: ...

    @property
    def unavailable(self) -> str | None: ...

    @property
    def unreachable_for(self) -> float | None:
        """Seconds since the database or server could no longer be reached; None while it can."""
        ...

    def probe(self) -> None: ...

    def close(self) -> None: ...
