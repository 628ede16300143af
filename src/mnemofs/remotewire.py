"""The wire's objects (API.md, ``/mnemofs/v1``) back into models: the HTTP backend's side of
``http/wire.py``. Standard library only, as ``remote.py``."""

from __future__ import annotations

from typing import Any

from mnemofs.models import (
    Actor,
    Attachment,
    Memory,
    MemoryId,
    MemoryStore,
    MemoryVersion,
    Session,
    SessionId,
    StoreId,
    StoreState,
    VersionId,
)


def precondition(given: dict[str, str] | str) -> dict[str, str]:
    """The wire's precondition object (API.md) for a content hash, or that object itself."""
    return {"type": "content_sha256", "content_sha256": given} if isinstance(given, str) else given


def memory(data: dict[str, Any]) -> Memory:
    return Memory(
        id=MemoryId(data["id"]),
        memory_store_id=StoreId(data["memory_store_id"]),
        path=data["path"],
        content_sha256=data["content_sha256"],
        content_size_bytes=int(data["content_size_bytes"]),
        memory_version_id=VersionId(data["memory_version_id"]),
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        content=data.get("content"),
    )


def version(data: dict[str, Any]) -> MemoryVersion:
    return MemoryVersion(
        id=VersionId(data["id"]),
        memory_store_id=StoreId(data["memory_store_id"]),
        memory_id=MemoryId(data["memory_id"]),
        operation=data["operation"],
        path=data.get("path"),
        content_sha256=data.get("content_sha256"),
        content_size_bytes=data.get("content_size_bytes"),
        created_at=data["created_at"],
        created_by=Actor.from_dict(data.get("created_by")),
        redacted_at=data.get("redacted_at"),
        redacted_by=Actor.from_dict(data.get("redacted_by")),
        content=data.get("content"),
    )


def store_of(data: dict[str, Any]) -> MemoryStore:
    return MemoryStore(
        id=StoreId(data["id"]),
        name=data["name"],
        description=data["description"],
        metadata=dict(data.get("metadata") or {}),
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        archived_at=data.get("archived_at"),
        memory_count=int(data.get("memory_count", 0)),
        kind=data.get("kind", "memory"),
        owner=data.get("owner", ""),
        on_full=data.get("on_full", "refuse"),
        secrets=data.get("secrets", "refuse"),
        max_memories=data.get("max_memories"),
        max_content_bytes=data.get("max_content_bytes"),
        pool_id=data.get("pool_id"),
    )


def state(store_id: str, data: dict[str, Any]) -> StoreState:
    return StoreState(
        StoreId(store_id), int(data["revision"]), data.get("archived_at"), int(data["memory_count"])
    )


def session(data: dict[str, Any]) -> Session:
    resources = tuple(
        Attachment(
            memory_store_id=StoreId(r["memory_store_id"]),
            access=r["access"],
            instructions=r.get("instructions") or "",
            name=r["name"],
            description=r.get("description") or "",
            mount_path=r["mount_path"],
            kind=r.get("kind", "memory"),
            on_full=r.get("on_full", "refuse"),
        )
        for r in data["resources"]
    )
    return Session(
        id=SessionId(data["id"]),
        created_at=data["created_at"],
        ended_at=data.get("ended_at"),
        mount_root=data.get("mount_root", "/mnt/memory"),
        resources=resources,
        user_id=data.get("user_id", ""),
    )
