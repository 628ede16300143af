"""Sessions: their attachments, end users' stores, ending."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from mnemofs import limits
from mnemofs.errors import (
    InvalidRequest,
)
from mnemofs.models import (
    ACCESS_MODES,
    SESSION_PREFIX,
    Page,
    Session,
    SessionId,
    new_id,
)
from mnemofs.paths import (
    unique_slugs,
)
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import (
    _decode_cursor,
    _encode_cursor,
    _no_nul,
    _validate_limit,
    _validate_user,
    utc_now,
)
from mnemofs.store.tx import Tx


class SessionsMixin(ServiceBase):
    """Sessions: their attachments, end users' stores, ending."""

    def create_session(
        self,
        resources: Iterable[Mapping[str, Any]] = (),
        *,
        mount_root: str = limits.DEFAULT_MOUNT_ROOT,
        user: str | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> Session:
        """A session with its store attachments, fixed for its lifetime; ``fields`` (what the
        caller sent beside them: agent, environment_id, metadata...) are kept as sent.

        With ``user`` the session acts for that end user: it may attach general stores and that
        user's stores, never another user's; with no resources given it attaches every live
        general store (read_only: what one user writes there, all would see) and every store
        of the user's (read_write; journals read_only).
        """
        user = _validate_user(user, "user")
        specs = [self._attachment_spec(i, r) for i, r in enumerate(resources)]
        if len(specs) > limits.MAX_STORES_PER_SESSION:
            raise InvalidRequest(
                f"{len(specs)} memory stores attached, over the limit of "
                f"{limits.MAX_STORES_PER_SESSION} per session"
            )
        seen: set[str] = set()
        for spec in specs:
            if spec["store_id"] in seen:
                raise InvalidRequest(f"memory store {spec['store_id']!r} is attached twice")
            seen.add(spec["store_id"])
        if not isinstance(mount_root, str) or not mount_root.startswith("/"):
            raise InvalidRequest(f"mount_root {mount_root!r} must be an absolute path")
        if not mount_root.isprintable():
            raise InvalidRequest(f"mount_root {mount_root!r} contains a control character")
        mount_root = mount_root.rstrip("/") or "/"
        kept = _validate_fields(fields)

        def run(tx: Tx) -> Session:
            if user and not specs:
                specs.extend(self._user_specs(tx, user))
            stores = []
            for spec in specs:
                row = self._store_row(tx, spec["store_id"])
                if user and row.owner not in ("", user):
                    raise InvalidRequest(
                        f"memory store {row.name!r} ({row.id}) belongs to another end user; a "
                        f"session for {user!r} may attach general stores and {user!r}'s only"
                    )
                if row.archived_at is not None:
                    raise InvalidRequest(
                        f"memory store {row.name!r} ({row.id}) is archived and cannot be attached"
                    )
                if row.kind == "journal":
                    if spec["access"] == "read_write":
                        raise InvalidRequest(
                            f"memory store {row.name!r} ({row.id}) is a journal: sessions attach "
                            "it read_only (records are appended by 'mnemofs journal append')"
                        )
                    spec["access"] = "read_only"
                spec["access"] = spec["access"] or "read_write"
                stores.append(row)
            session_id = SessionId(new_id(SESSION_PREFIX))
            tx.run(
                "INSERT INTO sessions (id, created_at, ended_at, mount_root, user_id, fields) "
                "VALUES (:id, :now, NULL, :root, :user, :fields)",
                {
                    "id": session_id,
                    "now": utc_now(),
                    "root": mount_root,
                    "user": user,
                    "fields": kept,
                },
            )
            slugs = unique_slugs(row.name for row in stores)
            for position, (spec, slug, row) in enumerate(zip(specs, slugs, stores, strict=True)):
                tx.run(
                    "INSERT INTO session_attachments (session_id, position, store_id, access, "
                    "instructions, slug, name, description) VALUES (:session, :position, "
                    ":store, :access, :instructions, :slug, :name, :description)",
                    {
                        "session": session_id,
                        "position": position,
                        "store": spec["store_id"],
                        "access": spec["access"],
                        "instructions": spec["instructions"],
                        "slug": slug,
                        "name": row.name,
                        "description": row.description,
                    },
                )
            return self._session(tx, session_id)

        return self._write(run)

    @staticmethod
    def _user_specs(tx: Tx, user: str) -> list[dict[str, Any]]:
        rows = tx.all(
            "SELECT id, owner FROM memory_stores WHERE archived_at IS NULL "
            "AND (owner = '' OR owner = :user) ORDER BY owner DESC, name, id",
            {"user": user},
        )
        if len(rows) > limits.MAX_STORES_PER_SESSION:
            raise InvalidRequest(
                f"{len(rows)} stores are visible to {user!r}, over the limit of "
                f"{limits.MAX_STORES_PER_SESSION} per session: attach them explicitly"
            )
        return [
            {"store_id": r.id, "access": None if r.owner else "read_only", "instructions": ""}
            for r in rows
        ]

    @staticmethod
    def _attachment_spec(index: int, resource: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(resource, Mapping):
            raise InvalidRequest(f"resource {index} must be a mapping, got {resource!r}")
        unknown = set(resource) - {"type", "memory_store_id", "access", "instructions"}
        if unknown:
            raise InvalidRequest(f"resource {index} has unknown field(s) {sorted(unknown)}")
        if resource.get("type", "memory_store") != "memory_store":
            raise InvalidRequest(
                f"resource {index} has type {resource.get('type')!r}; only 'memory_store' exists"
            )
        store_id = resource.get("memory_store_id")
        if not isinstance(store_id, str) or not store_id:
            raise InvalidRequest(f"resource {index} needs a memory_store_id")
        access = resource.get("access")  # None: read_write, read_only for a journal
        if access is not None and access not in ACCESS_MODES:
            raise InvalidRequest(
                f"resource {index} has access {access!r}; use 'read_write' or 'read_only'"
            )
        instructions = resource.get("instructions") or ""
        if not isinstance(instructions, str):
            raise InvalidRequest(f"resource {index} instructions must be a string")
        _no_nul(instructions, f"resource {index} instructions")
        if len(instructions) > limits.MAX_INSTRUCTIONS_CHARS:
            raise InvalidRequest(
                f"resource {index} instructions are {len(instructions)} characters, over "
                f"{limits.MAX_INSTRUCTIONS_CHARS}"
            )
        return {"store_id": store_id, "access": access, "instructions": instructions}

    def get_session(self, session_id: str) -> Session:
        return self._read(lambda tx: self._session(tx, session_id))

    def list_sessions(
        self,
        *,
        memory_store_id: str | None = None,
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        cursor: str | None = None,
    ) -> Page[Session]:
        """Sessions newest first; with ``memory_store_id`` only those it is attached to."""
        limit = _validate_limit(limit)
        query = json.dumps(["sessions", memory_store_id])
        before = _decode_cursor(query, cursor)
        where = []
        if memory_store_id is not None:
            where.append(
                "id IN (SELECT session_id FROM session_attachments WHERE store_id = :store)"
            )
        if before is not None:
            where.append("id < :before")
        sql = "SELECT id FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT :limit"

        def run(tx: Tx) -> Page[Session]:
            if memory_store_id is not None:
                self._store_row(tx, memory_store_id)
            params = {"store": memory_store_id, "before": before, "limit": limit + 1}
            ids = [r.id for r in tx.all(sql, params)]
            data = [self._session(tx, session_id) for session_id in ids[:limit]]
            return Page(
                data,
                _encode_cursor(query, ids[limit - 1]) if len(ids) > limit else None,
                lambda c: self.list_sessions(
                    memory_store_id=memory_store_id, limit=limit, cursor=c
                ),
            )

        return self._read(run)

    def end_session(self, session_id: str) -> Session:
        """End a session; ending an ended session changes nothing."""

        def run(tx: Tx) -> Session:
            tx.run(
                "UPDATE sessions SET ended_at = :now WHERE id = :id AND ended_at IS NULL",
                {"now": utc_now(), "id": session_id},
            )
            return self._session(tx, session_id)

        return self._write(run)


# Fields of a session that mnemofs computes: a caller cannot set them.
_COMPUTED = frozenset(
    {
        "id",
        "type",
        "created_at",
        "updated_at",
        "ended_at",
        "archived_at",
        "status",
        "resources",
        "mount_root",
        "user_id",
        "stats",
        "usage",
        "outcome_evaluations",
    }
)
MAX_FIELDS_BYTES = 64 * 1024  # what a session's creator may send beside its resources, as JSON


def _validate_fields(fields: Mapping[str, Any] | None) -> str:
    """What a session's creator sent beside its resources, as the JSON kept for it."""
    if not fields:
        return "{}"
    if not isinstance(fields, Mapping):
        raise InvalidRequest(f"session fields must be an object, got {fields!r}")
    taken = sorted(_COMPUTED & set(fields))
    if taken:
        raise InvalidRequest(f"session field(s) {taken} are set by mnemofs, not by the caller")
    agent = fields.get("agent")
    if agent is not None and not isinstance(agent, str | Mapping):
        raise InvalidRequest(f"agent must be an agent id or an object, got {agent!r}")
    for key in ("environment_id", "title"):
        if fields.get(key) is not None and not isinstance(fields[key], str):
            raise InvalidRequest(f"{key} must be a string, got {fields[key]!r}")
    metadata = fields.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise InvalidRequest(f"metadata must be an object of string values, got {metadata!r}")
    text = json.dumps(dict(fields), separators=(",", ":"))
    if len(text) > MAX_FIELDS_BYTES:
        raise InvalidRequest(
            f"session fields are {len(text)} bytes of JSON, over {MAX_FIELDS_BYTES}"
        )
    return text
