"""Sessions: their attachments, end users' stores, ending."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mnemofs import limits
from mnemofs.errors import (
    InvalidRequest,
)
from mnemofs.models import (
    ACCESS_MODES,
    SESSION_PREFIX,
    Session,
    SessionId,
    new_id,
)
from mnemofs.paths import (
    unique_slugs,
)
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import (
    _validate_user,
    utc_now,
)
from mnemofs.store.sql import Tx


class SessionsMixin(ServiceBase):
    """Sessions: their attachments, end users' stores, ending."""

    def create_session(
        self,
        resources: Iterable[Mapping[str, Any]] = (),
        *,
        mount_root: str = limits.DEFAULT_MOUNT_ROOT,
        user: str | None = None,
    ) -> Session:
        """A session with its store attachments, fixed for its lifetime.

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
        mount_root = mount_root.rstrip("/") or "/"

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
                "INSERT INTO sessions (id, created_at, ended_at, mount_root, user_id) "
                "VALUES (:id, :now, NULL, :root, :user)",
                {"id": session_id, "now": utc_now(), "root": mount_root, "user": user},
            )
            slugs = unique_slugs(row.name for row in stores)
            for position, (spec, slug) in enumerate(zip(specs, slugs, strict=True)):
                tx.run(
                    "INSERT INTO session_attachments (session_id, position, store_id, access, "
                    "instructions, slug) VALUES (:session, :position, :store, :access, "
                    ":instructions, :slug)",
                    {
                        "session": session_id,
                        "position": position,
                        "store": spec["store_id"],
                        "access": spec["access"],
                        "instructions": spec["instructions"],
                        "slug": slug,
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
        if len(instructions) > limits.MAX_INSTRUCTIONS_CHARS:
            raise InvalidRequest(
                f"resource {index} instructions are {len(instructions)} characters, over "
                f"{limits.MAX_INSTRUCTIONS_CHARS}"
            )
        return {"store_id": store_id, "access": access, "instructions": instructions}

    def get_session(self, session_id: str) -> Session:
        return self._read(lambda tx: self._session(tx, session_id))

    def end_session(self, session_id: str) -> Session:
        """End a session; ending an ended session changes nothing."""

        def run(tx: Tx) -> Session:
            tx.run(
                "UPDATE sessions SET ended_at = :now WHERE id = :id AND ended_at IS NULL",
                {"now": utc_now(), "id": session_id},
            )
            return self._session(tx, session_id)

        return self._write(run)
