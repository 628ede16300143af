"""A whole store back to a moment, or a new store from one (issue 19).

``restore_store`` makes the store's heads what they were at a time: one version per memory
that differs (content or path), a deletion for each memory made since, a re-creation (same
id, a ``created`` version) for each deleted since; one transaction, the caller as actor.
``fork_store`` makes a new store holding the heads of that time, each one ``created``
version, with where it came from in its metadata.

A memory's state at a time is its newest version created at or before it. That is only
known while the history is whole: a time before the store's ``pruned_before`` (a prune
removed versions older than that) is refused, and so is one where a memory's content then
has been redacted since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import Conflict, InvalidRequest
from mnemofs.models import STORE_PREFIX, MemoryStore, new_id
from mnemofs.store.base import ServiceBase
from mnemofs.store.check import check
from mnemofs.store.rows import _store, _validate_store_name, _validate_time, utc_now
from mnemofs.store.searchmarks import MOVED_VECTOR
from mnemofs.store.texts import _content_of
from mnemofs.store.tx import Tx

Step = Literal["modify", "move", "delete", "recreate"]


@dataclass(frozen=True, slots=True)
class RestoreStep:
    """One change a restore makes: ``path`` is where the memory ends up (or was, for a
    deletion); ``was`` where it is now, when that differs."""

    action: Step
    memory_id: str
    path: str
    was: str | None = None

    def __str__(self) -> str:
        if self.action == "move":
            return f"move      {self.was} -> {self.path}"
        return f"{self.action:9} {self.path}"


@dataclass(frozen=True, slots=True)
class _Then:
    """A memory as it was at the time: its path and content (None: it did not exist)."""

    memory_id: str
    path: str
    content: Content


class TimeTravelMixin(ServiceBase):
    """Restore and fork a store as of a time."""

    def restore_store(
        self,
        store_id: str,
        at: str | datetime,
        *,
        dry_run: bool = False,
        actor: str | None = None,
    ) -> list[RestoreStep]:
        """Make the heads of ``store_id`` what they were at ``at``; return the steps (with
        ``dry_run``, the steps it would take, and nothing changes)."""
        moment = _moment(at)

        def run(tx: Tx) -> list[RestoreStep]:
            row = self._lock_store(tx, store_id)
            if row.kind == "journal":
                raise InvalidRequest(
                    f"store {row.name!r} is a journal: its records are appended, never restored"
                )
            then = self._heads_at(tx, store_id, moment)
            now = {
                r.id: r
                for r in tx.all(
                    "SELECT id, store_id, path, content_sha256, size_bytes, created_at, "
                    "updated_at, head_version_id FROM memories WHERE store_id = :store",
                    {"store": store_id},
                )
            }
            steps = _plan(then, now)
            if dry_run or not steps:
                return steps
            self._apply(tx, store_id, steps, then, now, actor)
            self._lock_only(tx, store_id)()  # the revision moves: mounts look again
            tx.run(
                "UPDATE memory_stores SET memory_count = :n WHERE id = :id",
                {"n": len(then), "id": store_id},
            )
            problems = check(tx, store_id).problems
            if problems:
                raise Conflict(f"restoring to {moment} would leave: {'; '.join(problems[:3])}")
            return steps

        steps: list[RestoreStep] = self.db.run(run, write=True)
        if steps and not dry_run:
            self.search_trail.wrote()
        return steps

    def fork_store(
        self, store_id: str, at: str | datetime, *, name: str, actor: str | None = None
    ) -> MemoryStore:
        """A new store named ``name`` holding the heads of ``store_id`` at ``at``."""
        moment = _moment(at)
        name = _validate_store_name(name)

        def run(tx: Tx) -> MemoryStore:
            row = self._store_row(tx, store_id)
            then = self._heads_at(tx, store_id, moment)
            fork = new_id(STORE_PREFIX)
            created = utc_now()
            metadata = {"forked_from": store_id, "forked_at": moment}
            tx.run(
                "INSERT INTO memory_stores (id, name, description, metadata, created_at, "
                "updated_at, archived_at, memory_count, revision, kind, owner, on_full, "
                "secrets) VALUES (:id, :name, :description, :metadata, :now, :now, NULL, :n, 0, "
                ":kind, :owner, :on_full, :secrets)",
                {
                    "id": fork,
                    "name": name,
                    "description": row.description,
                    "metadata": json.dumps(metadata),
                    "now": created,
                    "n": len(then),
                    "kind": row.kind,
                    "owner": row.owner,
                    "on_full": row.on_full,
                    "secrets": row.secrets,
                },
            )
            for memory in sorted(then.values(), key=lambda m: m.path):
                self._insert_memory(tx, fork, memory.path, memory.content, actor)
            return _store(self._store_row(tx, fork))

        store: MemoryStore = self.db.run(run, write=True)
        self.search_trail.wrote()
        return store

    def _heads_at(self, tx: Tx, store_id: str, moment: str) -> dict[str, _Then]:
        """Every memory that was live at ``moment``, by id."""
        store = tx.one(
            "SELECT created_at, pruned_before FROM memory_stores WHERE id = :id", {"id": store_id}
        )
        if moment < store.created_at:
            raise InvalidRequest(
                f"the store did not exist yet at {moment} (it was made at {store.created_at})"
            )
        pruned = store.pruned_before
        if pruned is not None and moment < pruned:
            raise InvalidRequest(
                f"the store's history before {pruned} was pruned: its state at {moment} is not "
                "known (choose a later time, or import an export made before the prune)"
            )
        rows = tx.all(
            f"SELECT v.id, v.memory_id, v.operation, v.path, {_content_of('v')}, "
            "v.content_sha256, v.size_bytes, v.redacted_at FROM memory_versions v "
            "WHERE v.store_id = :store "
            "AND v.seq = (SELECT MAX(w.seq) FROM memory_versions w "
            "WHERE w.memory_id = v.memory_id AND w.created_at <= :at)",
            {"store": store_id, "at": moment},
        )
        then: dict[str, _Then] = {}
        for v in rows:
            if v.operation == "deleted":
                continue
            if v.content is None:
                raise InvalidRequest(
                    f"{v.path!r} at {moment} is version {v.id}, which was redacted: its content "
                    "is gone, so the store cannot be brought back to that time"
                )
            content = Content.stored(v.content, v.content_sha256, v.size_bytes)
            then[v.memory_id] = _Then(v.memory_id, v.path, content)
        if len(then) > limits.MAX_MEMORIES_PER_STORE:  # pragma: no cover - was valid then
            raise InvalidRequest("the store held more memories then than a store may hold")
        return then

    def _apply(
        self,
        tx: Tx,
        store_id: str,
        steps: list[RestoreStep],
        then: dict[str, _Then],
        now: dict[str, Any],
        actor: str | None,
    ) -> None:
        """Deletions first, then every moved memory out of the way (a path no memory can
        have, no version: two memories may trade paths), then changes and re-creations."""
        stamp = utc_now()
        for step in steps:
            if step.action == "delete":
                self._remove_memory(
                    tx, store_id, now[step.memory_id], actor, stamp, keep_directory=False
                )
        for step in steps:
            if step.action in ("modify", "move"):
                tx.run(
                    f"UPDATE memories SET {MOVED_VECTOR[tx.dialect]}path = :parked WHERE id = :id",
                    {"parked": f"restoring:{step.memory_id}", "id": step.memory_id},
                )
        for step in steps:
            if step.action == "delete":
                continue
            memory = then[step.memory_id]
            if step.action in ("modify", "move"):
                row = now[step.memory_id]
                self._apply_update(tx, store_id, row, memory.path, memory.content, actor)
            elif step.action == "recreate":
                self._insert_memory(
                    tx, store_id, memory.path, memory.content, actor, memory_id=memory.memory_id
                )


def _moment(at: str | datetime) -> str:
    moment = _validate_time(at, "at")
    if moment is None:
        raise InvalidRequest("a time is needed (RFC 3339, e.g. 2026-12-01T09:30:00Z)")
    return moment


def _plan(then: dict[str, _Then], now: dict[str, Any]) -> list[RestoreStep]:
    steps: list[RestoreStep] = []
    for memory_id, row in sorted(now.items(), key=lambda kv: kv[1].path):
        if memory_id not in then:
            steps.append(RestoreStep("delete", memory_id, row.path))
    for memory_id, memory in sorted(then.items(), key=lambda kv: kv[1].path):
        row = now.get(memory_id)
        if row is None:
            steps.append(RestoreStep("recreate", memory_id, memory.path))
        elif row.path != memory.path:
            steps.append(RestoreStep("move", memory_id, memory.path, row.path))
        elif row.content_sha256 != memory.content.sha256:
            steps.append(RestoreStep("modify", memory_id, memory.path))
    return steps
