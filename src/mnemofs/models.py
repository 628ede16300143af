"""The resources of SPEC.md §1 as frozen dataclasses, shared by every layer.

Field names are the spec's, so ``to_dict()`` is the JSON the CLI prints. SQL rows never leave
``mnemofs.store``; these do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, NewType, TypeVar

from ulid import ULID

StoreId = NewType("StoreId", str)
MemoryId = NewType("MemoryId", str)
VersionId = NewType("VersionId", str)
SessionId = NewType("SessionId", str)

Access = Literal["read_write", "read_only"]
ACCESS_MODES: tuple[Access, ...] = ("read_write", "read_only")
StoreKind = Literal["memory", "journal"]
STORE_KINDS: tuple[StoreKind, ...] = ("memory", "journal")
OnFull = Literal["refuse", "evict-lru"]
ON_FULL_POLICIES: tuple[OnFull, ...] = ("refuse", "evict-lru")
SecretsPolicy = Literal["refuse", "allow"]
SECRETS_POLICIES: tuple[SecretsPolicy, ...] = ("refuse", "allow")
Operation = Literal["created", "modified", "renamed", "deleted"]

STORE_PREFIX = "memstore_"
MEMORY_PREFIX = "mem_"
VERSION_PREFIX = "memver_"
SESSION_PREFIX = "sess_"


def new_id(prefix: str) -> str:
    """A fresh id: the resource's prefix and a ULID (sortable by creation time)."""
    return prefix + str(ULID())


class _Resource:
    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The spec's JSON shape; ``content`` is left out where the object carries none."""
        data = dataclasses.asdict(self)  # type: ignore[call-overload]
        if "content" in data and data["content"] is None:
            del data["content"]
        return {"type": self.type, **data}


@dataclass(frozen=True, slots=True)
class MemoryStore(_Resource):
    id: StoreId
    name: str
    description: str
    created_at: str
    updated_at: str
    archived_at: str | None
    memory_count: int
    kind: StoreKind = "memory"
    owner: str = ""  # the end user it belongs to; "" for a general store
    on_full: OnFull = "refuse"  # what a create does when the store is full
    secrets: SecretsPolicy = "refuse"  # whether a save holding a credential is refused

    type = "memory_store"


@dataclass(frozen=True, slots=True)
class Memory(_Resource):
    """A live memory. ``content`` is ``None`` in list entries, which never carry content."""

    id: MemoryId
    memory_store_id: StoreId
    path: str
    content_sha256: str
    size_bytes: int
    created_at: str
    updated_at: str
    version_id: VersionId
    content: str | None = None

    type = "memory"


@dataclass(frozen=True, slots=True)
class MemoryPrefix(_Resource):
    """A directory in a depth-1 listing: implied by memories under it, or made by mkdir."""

    path: str

    type = "memory_prefix"


@dataclass(frozen=True, slots=True)
class MemoryVersion(_Resource):
    """One immutable change. ``content`` is ``None`` in list entries, once redacted, and for
    ``deleted`` (the version before it holds what was deleted)."""

    id: VersionId
    memory_store_id: StoreId
    memory_id: MemoryId
    operation: Operation
    path: str
    content_sha256: str | None
    size_bytes: int
    created_at: str
    actor: str
    redacted_at: str | None
    content: str | None = None

    type = "memory_version"


@dataclass(frozen=True, slots=True)
class Attachment(_Resource):
    memory_store_id: StoreId
    access: Access
    instructions: str
    name: str
    description: str
    mount_path: str
    kind: StoreKind = "memory"
    on_full: OnFull = "refuse"

    type = "memory_store"


@dataclass(frozen=True, slots=True)
class Session(_Resource):
    id: SessionId
    created_at: str
    ended_at: str | None
    mount_root: str
    resources: tuple[Attachment, ...]
    user_id: str = ""  # the end user the session acts for; "" for none

    type = "session"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "id": self.id,
            "created_at": self.created_at,
            "ended_at": self.ended_at,
            "mount_root": self.mount_root,
            "user_id": self.user_id,
            "resources": [a.to_dict() for a in self.resources],
        }


@dataclass(frozen=True, slots=True)
class SecretFinding(_Resource):
    """A credential found in a stored version (``mnemofs db scan-secrets``): where and what
    kind, never the credential."""

    memory_store_id: StoreId
    memory_id: MemoryId
    version_id: VersionId
    path: str
    line: int
    kind: str

    type = "secret_finding"


@dataclass(frozen=True, slots=True)
class SearchHit(_Resource):
    """A live memory that matched a search, best first; ``snippet`` marks matches ``[like
    this]``; ``score`` only orders hits of one search."""

    memory_id: MemoryId
    memory_store_id: StoreId
    path: str
    snippet: str
    score: float

    type = "search_hit"


@dataclass(frozen=True, slots=True)
class StoreState:
    """What a mount watches to notice a store changed under it."""

    id: StoreId
    revision: int
    archived_at: str | None
    memory_count: int


@dataclass(frozen=True, slots=True)
class StoreSnapshot:
    """A store's whole tree at one moment, without content: what a mount starts from."""

    store: MemoryStore
    revision: int
    memories: tuple[Memory, ...]
    directories: tuple[str, ...]  # explicit (mkdir) directories, as prefixes
    last_seq: int  # the newest version's position in the change feed


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of a store's change feed: a version and its position (``seq``)."""

    seq: int
    version: MemoryVersion


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing. Iterating walks this page and every following one."""

    data: list[T]
    next_cursor: str | None
    _fetch_next: Callable[[str], Page[T]] | None = field(default=None, repr=False, compare=False)

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None

    def __iter__(self) -> Iterator[T]:
        page: Page[T] = self
        while True:
            yield from page.data
            if page.next_cursor is None or page._fetch_next is None:
                return
            page = page._fetch_next(page.next_cursor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": [item.to_dict() for item in self.data],  # type: ignore[attr-defined]
            "next_cursor": self.next_cursor,
        }
