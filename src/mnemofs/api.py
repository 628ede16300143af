"""The Python API: the seed SDK's resource names over ``MemoryService``.

ws = mnemofs.open()                      # $MNEMOFS_DB or the default SQLite file
store = ws.memory_stores.create(name="User Preferences", description="...")
mem = ws.memory_stores.memories.create(store.id, path="/prefs.md", content="tabs")
ws.memory_stores.memories.update(mem.id, memory_store_id=store.id, content="spaces",
                                 precondition={"type": "content_sha256",
                                               "content_sha256": mem.content_sha256})
for v in ws.memory_stores.memory_versions.list(store.id, memory_id=mem.id): ...
session = ws.sessions.create(resources=[{"type": "memory_store",
                                         "memory_store_id": store.id}])
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from mnemofs import limits
from mnemofs.models import (
    CapacityPool,
    Deleted,
    Memory,
    MemoryPrefix,
    MemoryStore,
    MemoryVersion,
    OnFull,
    Page,
    SearchHit,
    Session,
    SessionToken,
    StoreKind,
    View,
)
from mnemofs.store.engine import make_engine
from mnemofs.store.service import MemoryService, prompt_note
from mnemofs.store.timetravel import RestoreStep


class Memories:
    def __init__(self, service: MemoryService) -> None:
        self._s = service

    def create(
        self, memory_store_id: str, *, path: str, content: str | None, view: View = "basic"
    ) -> Memory:
        return self._s.create_memory(memory_store_id, path, content or "").in_view(view)

    def retrieve(self, memory_id: str, *, memory_store_id: str, view: View = "full") -> Memory:
        return self._s.get_memory(memory_store_id, memory_id).in_view(view)

    def list(
        self,
        memory_store_id: str,
        *,
        path_prefix: str = "/",
        depth: int | None = 0,
        view: View = "basic",
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        page: str | None = None,
    ) -> Page[Memory | MemoryPrefix]:
        return self._s.list_memories(
            memory_store_id,
            path_prefix=path_prefix,
            depth=depth,
            view=view,
            limit=limit,
            cursor=page,
        )

    def update(
        self,
        memory_id: str,
        *,
        memory_store_id: str,
        content: str | None = None,
        path: str | None = None,
        precondition: Mapping[str, str] | None = None,
        view: View = "basic",
    ) -> Memory:
        return self._s.update_memory(
            memory_store_id, memory_id, content=content, path=path, precondition=precondition
        ).in_view(view)

    def delete(
        self, memory_id: str, *, memory_store_id: str, expected_content_sha256: str | None = None
    ) -> Deleted:
        self._s.delete_memory(
            memory_store_id,
            memory_id,
            expected_content_sha256=expected_content_sha256,
            archived_ok=True,
        )
        return Deleted(memory_id, "memory_deleted")


class MemoryVersions:
    def __init__(self, service: MemoryService) -> None:
        self._s = service

    def list(
        self,
        memory_store_id: str,
        *,
        memory_id: str | None = None,
        session_id: str | None = None,
        api_key_id: str | None = None,
        operation: str | None = None,
        created_at_gte: str | datetime | None = None,
        created_at_lte: str | datetime | None = None,
        view: View = "basic",
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        page: str | None = None,
    ) -> Page[MemoryVersion]:
        return self._s.list_versions(
            memory_store_id,
            memory_id=memory_id,
            session_id=session_id,
            api_key_id=api_key_id,
            operation=operation,
            created_at_gte=created_at_gte,
            created_at_lte=created_at_lte,
            view=view,
            limit=limit,
            cursor=page,
        )

    def retrieve(
        self, version_id: str, *, memory_store_id: str, view: View = "full"
    ) -> MemoryVersion:
        return self._s.get_version(memory_store_id, version_id).in_view(view)

    def redact(self, version_id: str, *, memory_store_id: str) -> MemoryVersion:
        return self._s.redact_version(memory_store_id, version_id)

    def prune(
        self,
        memory_store_id: str,
        *,
        older_than_days: float = limits.DEFAULT_RETENTION_DAYS,
        keep_last: int = limits.DEFAULT_KEEP_VERSIONS,
    ) -> int:
        return self._s.prune_versions(
            memory_store_id, older_than_days=older_than_days, keep_last=keep_last
        )


class MemoryStores:
    def __init__(self, service: MemoryService) -> None:
        self._s = service
        self.memories = Memories(service)
        self.memory_versions = MemoryVersions(service)

    def create(
        self,
        *,
        name: str,
        description: str = "",
        metadata: Mapping[str, str] | None = None,
        kind: StoreKind = "memory",
        owner: str = "",
        max_memories: int | None = None,
        max_content_bytes: int | None = None,
    ) -> MemoryStore:
        """A new store; ``max_memories``/``max_content_bytes`` are its own caps, below the
        global limits."""
        return self._s.create_store(
            name,
            description,
            kind=kind,
            owner=owner,
            metadata=metadata,
            max_memories=max_memories,
            max_content_bytes=max_content_bytes,
        )

    def retrieve(self, memory_store_id: str) -> MemoryStore:
        return self._s.get_store(memory_store_id)

    def update(
        self,
        memory_store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, str | None] | None = None,
        max_memories: int | None = None,
        max_content_bytes: int | None = None,
        evict: bool = False,
    ) -> MemoryStore:
        """Change what is given; a cap of 0 removes it (see ``MemoryService.update_store``)."""
        return self._s.update_store(
            memory_store_id,
            name=name,
            description=description,
            metadata=metadata,
            max_memories=max_memories,
            max_content_bytes=max_content_bytes,
            evict=evict,
        )

    def list(
        self,
        *,
        include_archived: bool = False,
        created_at_gte: str | datetime | None = None,
        created_at_lte: str | datetime | None = None,
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        page: str | None = None,
    ) -> Page[MemoryStore]:
        return self._s.list_stores(
            include_archived=include_archived,
            created_at_gte=created_at_gte,
            created_at_lte=created_at_lte,
            limit=limit,
            cursor=page,
        )

    def archive(self, memory_store_id: str) -> MemoryStore:
        return self._s.archive_store(memory_store_id)

    def restore(
        self, memory_store_id: str, *, at: str | datetime, dry_run: bool = False
    ) -> builtins.list[RestoreStep]:
        """Make the store's memories what they were at ``at`` (one transaction); the steps."""
        return self._s.restore_store(memory_store_id, at, dry_run=dry_run)

    def fork(self, memory_store_id: str, *, at: str | datetime, name: str) -> MemoryStore:
        """A new store holding this one's memories as they were at ``at``."""
        return self._s.fork_store(memory_store_id, at, name=name)

    def delete(self, memory_store_id: str) -> Deleted:
        self._s.delete_store(memory_store_id)
        return Deleted(memory_store_id, "memory_store_deleted")


class Sessions:
    def __init__(self, service: MemoryService) -> None:
        self._s = service

    def create(
        self,
        *,
        resources: Iterable[Mapping[str, Any]],
        mount_root: str = limits.DEFAULT_MOUNT_ROOT,
        **fields: Any,
    ) -> Session:
        """A session with its store attachments; other fields (``agent``, ``environment_id``,
        ``metadata``, ``title``...) are kept and returned as sent."""
        return self._s.create_session(resources, mount_root=mount_root, fields=fields)

    def retrieve(self, session_id: str) -> Session:
        return self._s.get_session(session_id)

    def list(
        self,
        *,
        memory_store_id: str | None = None,
        limit: int = limits.DEFAULT_PAGE_LIMIT,
        page: str | None = None,
    ) -> Page[Session]:
        return self._s.list_sessions(memory_store_id=memory_store_id, limit=limit, cursor=page)

    def token(self, session_id: str) -> SessionToken:
        """A bearer token for this session alone (its ``token`` is shown only here)."""
        return self._s.create_session_token(session_id)

    def end(self, session_id: str) -> Session:
        return self._s.end_session(session_id)

    def prompt(self, session_id: str) -> str:
        """The prompt note for the session's attachments (see ``prompt_note``)."""
        return prompt_note(self._s.get_session(session_id))


class CapacityPools:
    """Stores sharing one capacity (see ``mnemofs.store.pools``)."""

    def __init__(self, service: MemoryService) -> None:
        self._s = service

    def create(self, *, name: str, max_memories: int, on_full: OnFull = "refuse") -> CapacityPool:
        return self._s.create_pool(name, max_memories, on_full=on_full)

    def retrieve(self, pool_id: str) -> CapacityPool:
        return self._s.get_pool(pool_id)

    def list(self) -> builtins.list[CapacityPool]:
        return self._s.list_pools()

    def add_stores(self, pool_id: str, memory_store_ids: Iterable[str]) -> CapacityPool | None:
        return self._s.set_pool(builtins.list(memory_store_ids), pool_id)

    def remove_stores(self, memory_store_ids: Iterable[str]) -> None:
        self._s.set_pool(builtins.list(memory_store_ids), None)

    def update(
        self,
        pool_id: str,
        *,
        max_memories: int | None = None,
        on_full: OnFull | None = None,
        evict: bool = False,
    ) -> CapacityPool:
        return self._s.update_pool(pool_id, max_memories=max_memories, on_full=on_full, evict=evict)

    def delete(self, pool_id: str) -> None:
        self._s.delete_pool(pool_id)

    def search(
        self,
        pool_id: str,
        query: str,
        *,
        user_id: str | None = None,
        limit: int = limits.DEFAULT_SEARCH_LIMIT,
    ) -> builtins.list[SearchHit]:
        return self._s.search_pool(pool_id, query, user=user_id, limit=limit)


class Workspace:
    """One database: every store, memory, version and session in it."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.memory_stores = MemoryStores(service)
        self.sessions = Sessions(service)
        self.capacity_pools = CapacityPools(service)

    def close(self) -> None:
        self.service.close()
        self.service.engine.dispose()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(url: str | None = None, *, actor: str = "api") -> Workspace:
    """Open the workspace at ``url`` (a SQLAlchemy URL or a SQLite file path; default
    ``$MNEMOFS_DB`` or the XDG data directory), creating a new database's schema."""
    return Workspace(MemoryService(make_engine(url), actor=actor))
