"""The change feed and the database's state, for mounts and sync workers: snapshots,
changes since a position, notifications, checkpoints, reachability, the consistency check.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from mnemofs.errors import InvalidRequest, NotFound, Unavailable
from mnemofs.models import (
    Change,
    MemoryId,
    StoreId,
    StoreSnapshot,
    StoreState,
)
from mnemofs.secrets import load_checks
from mnemofs.store.base import ServiceBase
from mnemofs.store.check import CheckReport, check
from mnemofs.store.listener import Listener
from mnemofs.store.notices import CHANGES_CHANNEL
from mnemofs.store.rows import (
    _MEMORY_COLS,
    _STORE_COLS,
    _VERSION_COLS,
    SEQ_END,
    _memory,
    _placeholders,
    _store,
    _version,
    store_seq_range,
)
from mnemofs.store.tx import Tx

_STATE_COLS = "id, revision, archived_at, memory_count"  # of memory_stores: a StoreState


def _state(row: Any) -> StoreState:
    return StoreState(StoreId(row.id), row.revision, row.archived_at, row.memory_count)


class FeedMixin(ServiceBase):
    """The change feed and the database's state, for mounts and sync workers: snapshots,"""

    def listen_for_changes(self) -> Listener | None:
        """A listener woken when any store changes (PostgreSQL); None where the database has no
        notifications (SQLite: watch ``data_version`` instead)."""
        return self.db.listener(CHANGES_CHANNEL)

    def snapshot(self, store_id: str) -> StoreSnapshot:
        """The store's whole tree (no content) and its position in the change feed, read at one
        moment: a memory made between the two would be in neither (PostgreSQL reads otherwise
        see each statement's own moment)."""

        def run(tx: Tx) -> StoreSnapshot:
            row = tx.one(
                f"SELECT {_STORE_COLS}, revision FROM memory_stores WHERE id = :id",
                {"id": store_id},
            )
            if row is None:
                raise NotFound(f"memory store {store_id!r} not found")
            mems = tx.all(
                f"SELECT {_MEMORY_COLS} FROM memories WHERE store_id = :store ORDER BY path",
                {"store": store_id},
            )
            dirs = tx.all(
                "SELECT path FROM directories WHERE store_id = :store ORDER BY path",
                {"store": store_id},
            )
            versions = store_seq_range(tx.dialect)  # the newest: its index's last entry
            last = tx.scalar(
                f"SELECT seq FROM memory_versions WHERE {versions.where} "
                f"ORDER BY {versions.newest_first} LIMIT 1",
                {"store": store_id, "lo": 0, "hi": SEQ_END},
            )
            return StoreSnapshot(
                store=_store(row),
                revision=row.revision,
                memories=tuple(_memory(m) for m in mems),
                directories=tuple(d.path for d in dirs),
                last_seq=int(last or 0),
            )

        return self._read(run, snapshot=True)

    def store_states(self, store_ids: list[str]) -> dict[StoreId, StoreState]:
        """Revision and archive state of each store that still exists."""
        if not store_ids:
            return {}
        in_list, params = _placeholders("s", list(store_ids))

        def run(tx: Tx) -> dict[StoreId, StoreState]:
            query = f"SELECT {_STATE_COLS} FROM memory_stores WHERE id IN ({in_list})"
            rows = tx.all(query, params)
            return {StoreId(r.id): _state(r) for r in rows}

        return self._read(run)

    def own_since(
        self, store_ids: list[str], version: int | None
    ) -> dict[StoreId, tuple[StoreState, int]] | None:
        """Each store's state and the end of its change feed (the ``seq`` of its newest
        version, 0 for none), read now, if no other connection has committed since
        ``data_version`` said ``version`` on this thread: whatever moved them since then was
        this thread's own writes. None when that cannot be said (another connection committed,
        or the database keeps no ``data_version``: PostgreSQL). A mount that shows its own
        writes as it makes them takes these as seen, so the next look for others' changes
        does not read its own back (``RefreshMixin.adopt_own``). Nor after this service
        evicted a memory (``evict-lru``, in a create's transaction: its caller shows the
        create, not the eviction), once: the look it answers reads the eviction back."""
        if self._evictions_seen != self.evictions:
            self._evictions_seen = self.evictions
            return None
        if version is None or not store_ids:
            return None
        in_list, params = _placeholders("s", list(store_ids))

        def run(tx: Tx) -> dict[StoreId, tuple[StoreState, int]]:
            rows = tx.all(
                f"SELECT {_STATE_COLS}, (SELECT MAX(v.seq) FROM memory_versions v "
                f"WHERE v.store_id = memory_stores.id) AS last "
                f"FROM memory_stores WHERE id IN ({in_list})",
                params,
            )
            return {StoreId(r.id): (_state(r), int(r.last or 0)) for r in rows}

        heads = self._read(run)
        # Asked after the read, on the same connection: unchanged, nobody else committed
        # before the read either.
        return heads if self.db.data_version() == version else None

    def own_moves(self, store_id: str, seen: int, now: int) -> int | None:
        """None: a local mount has ``own_since`` (moves.py is a remote mount's)."""
        return None

    def changes(self, store_id: str, after_seq: int, *, limit: int = 1000) -> list[Change]:
        """Versions written to the store after position ``after_seq``, oldest first."""
        if not 0 <= after_seq <= SEQ_END:  # a database integer holds no other
            raise InvalidRequest(f"after must be a feed position, 0 to {SEQ_END}: {after_seq}")

        def run(tx: Tx) -> list[Change]:
            versions = store_seq_range(tx.dialect)
            rows = tx.all(
                f"SELECT {_VERSION_COLS}, seq, folded_id FROM memory_versions "
                f"WHERE {versions.where} ORDER BY {versions.oldest_first} LIMIT :limit",
                {"store": store_id, "lo": after_seq, "hi": SEQ_END, "limit": limit},
            )
            out: list[Change] = []
            for r in rows:
                version = _version(r)
                if r.folded_id is not None:  # the folded memory is gone (see rename_over)
                    gone = replace(
                        version,
                        memory_id=MemoryId(r.folded_id),
                        operation="deleted",
                        content_sha256=None,
                        content_size_bytes=None,
                    )
                    out.append(Change(int(r.seq), gone))
                out.append(Change(int(r.seq), version))
            return out

        return self._read(run)

    def explicit_directories(self, store_id: str) -> list[str]:
        return self._read(
            lambda tx: [
                r.path
                for r in tx.all(
                    "SELECT path FROM directories WHERE store_id = :store ORDER BY path",
                    {"store": store_id},
                )
            ]
        )

    def check(self, store_id: str | None = None) -> CheckReport:
        """Check the database (or one store) against the rules, read-only (see ``check.py``)."""

        def run(tx: Tx) -> CheckReport:
            if store_id is not None:
                self._store_row(tx, store_id)  # NotFound for a wrong id
            return check(tx, store_id)

        if store_id is None:  # the index is checked against the memories: up to date first
            self.catch_up_search()

        return self._read(run, snapshot=True)  # counts and rows of one moment, whatever runs

    def defer_checkpoints(self) -> None:
        """For a long-lived writer whose thread answers a program waiting on each reply (a
        mount), called on that thread: keep WAL checkpoints out of its commits (SQLite; it
        then calls ``checkpoint`` from a background thread), and on PostgreSQL let its waits
        for replies spin briefly and its plans use indexes (``Database.serve_interactively``).
        The secrets screen is loaded now, on a thread of its own, rather than by the first
        save, which it made 70-140 ms slower (the CLI loads it only when it saves)."""
        self.db.defer_checkpoints()
        self.db.serve_interactively()
        self.warm_up()

    def warm_up(self) -> None:
        """For a long-lived process: load the secrets screen on a thread of its own now, rather
        than in the first save, which it made 70-140 ms slower."""
        threading.Thread(target=load_checks, name="mnemofs-warm-up", daemon=True).start()

    def write_at_once(self, on: bool = True, *, again: bool = False, last: bool = False) -> None:
        """For a thread that must never wait for SQLite's write lock (a server's event loop,
        a mount's), before each call: that call's first write raises ``WriteWouldWait``, having
        done nothing, rather than wait (``Database.write_at_once``); the caller makes the call
        again a little later, having served the others meanwhile. ``on=False`` after it;
        ``again`` when it does, ``last`` once it has waited long enough (``errors.Patience``)."""
        self.db.write_at_once(on, again=again, last=last)

    def checkpoint(self, *, force: bool = False) -> None:
        """Background upkeep of a long-lived writer (a mount's worker thread, when
        ``checkpoint_due``): write the reads noted (``note_access``) once due, take saved
        changes into the search index once writes pause (``SearchTrail``; on PostgreSQL the
        service's own trailer thread does), and keep the WAL small (``Database.checkpoint``)."""
        if _now(self._accesses_in()):
            self.flush_accesses()
        if _now(self.search_trail.due_in()):
            self.catch_up_search(upkeep=True)
        self.db.checkpoint(force=force)

    def checkpoint_due(self) -> bool:
        """Whether ``checkpoint`` has work to do now (``upkeep_in``)."""
        return _now(self.upkeep_in())

    def upkeep_in(self) -> float | None:
        """Seconds until ``checkpoint`` has work (0 or less: now) if nothing is written, read
        or heard meanwhile; None while it has none, until then. Clocks and a stat, no query: a
        mount asks often, and goes to a worker thread only when there is work; an idle mount
        sleeps until its next request."""
        waits = (self._accesses_in(), self.search_trail.due_in(), self.db.checkpoint_in())
        return min((wait for wait in waits if wait is not None), default=None)

    def data_version(self) -> int | None:
        """A number that changes when another connection commits (SQLite); None elsewhere.
        A change heard here may have left notes for the search index (``SearchTrail.heard``)."""
        version = self.db.data_version()
        self.search_trail.heard(version)
        return version

    def commit_files(self) -> list[str]:
        """Files every commit writes (SQLite), for a mount to watch; empty on PostgreSQL."""
        return self.db.commit_files()

    def flush_to_disk(self) -> None:
        """Make every change committed so far survive a power loss, not only a crash: a
        mount's ``fsync``. SQLite syncs its log only at checkpoints (``synchronous=NORMAL``);
        PostgreSQL's commits are as durable as its server is set to make them."""
        try:
            self.db.flush_to_disk()
        except OSError as exc:
            raise Unavailable(f"could not sync the database to disk: {exc.strerror}") from exc

    def defer_reconnects(self) -> None:
        """For a process that must never wait on the network (a mount): while the database is
        unreachable every call fails at once with ``Unavailable`` (a write at once:
        ``WriteWouldWait`` for the outage's first seconds); only ``probe`` (from a background
        thread) reconnects."""
        self.db.reconnect_by_probe = True

    @property
    def unavailable(self) -> str | None:
        """Why the database is unreachable, or None while it is reachable."""
        return self.db.unavailable

    @property
    def unreachable_for(self) -> float | None:
        """Seconds since the database could no longer be reached; None while it can."""
        return self.db.unreachable_for()

    def probe(self) -> None:
        """Try to reach the database again (blocking); ``Unavailable`` while it cannot be."""
        self.db.probe()


def _now(wait: float | None) -> bool:
    """Whether a wait of ``upkeep_in``'s kind is over."""
    return wait is not None and wait <= 0
