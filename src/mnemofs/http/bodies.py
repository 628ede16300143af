"""Request bodies as the wire defines them (``API.md``). The framework checks their shape
(types, required keys, enum values) and the store checks their values (paths, sizes, limits);
both refusals become a 400 ``invalid_request_error``. These models are also what
``/openapi.json`` documents."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StoreCreate(BaseModel):
    name: str = Field(description="1-255 characters.")
    description: str = Field("", description="Shown to the agent; at most 1,024 characters.")
    metadata: dict[str, str] | None = Field(None, description="At most 16 string pairs.")
    # mnemofs's own (issue 20): caps below the global limits.
    max_memories: int | None = Field(None, description="The store's own cap on memories.")
    max_content_bytes: int | None = Field(None, description="The store's own cap per memory.")


class StoreUpdate(BaseModel):
    name: str | None = None
    description: str | None = Field(None, description='"" clears it.')
    metadata: dict[str, str | None] | None = Field(
        None, description="Merged into the store's; a null value deletes that key."
    )
    max_memories: int | None = Field(None, description="The store's own cap; 0 removes it.")
    max_content_bytes: int | None = Field(None, description="Per memory; 0 removes it.")
    evict: bool = Field(False, description="A lower cap of an evict-lru store evicts the excess.")


class Precondition(BaseModel):
    type: Literal["content_sha256"]
    content_sha256: str


class MemoryCreate(BaseModel):
    path: str = Field(description="Absolute, at most 1,024 bytes and 20 segments, NFC.")
    content: str | None = Field(description="UTF-8 text, at most 102,400 bytes; null: empty.")


class MemoryUpdate(BaseModel):
    content: str | None = Field(None, description="Omitted (or null): unchanged.")
    path: str | None = Field(None, description="A new path: a rename. Omitted: unchanged.")
    precondition: Precondition | None = Field(
        None, description="Apply only while the current content has this hash."
    )


class MemoryStoreResource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["memory_store"]
    memory_store_id: str
    access: Literal["read_write", "read_only"] | None = None
    instructions: str | None = Field(None, description="At most 4,096 characters.")


class SessionCreate(BaseModel):
    """A session's attachments; every other field (agent, environment_id, metadata, title...)
    is kept and returned as sent."""

    model_config = ConfigDict(extra="allow")

    resources: list[MemoryStoreResource] = Field(default_factory=list, max_length=64)


class KeyCreate(BaseModel):
    name: str = Field(description="What the key is for; 1-255 characters.")


class PoolCreate(BaseModel):
    name: str
    max_memories: int = Field(description="Live memories over every store of the pool.")
    on_full: Literal["refuse", "evict-lru"] = "refuse"


class PoolStores(BaseModel):
    memory_store_ids: list[str] = Field(max_length=10_000)
