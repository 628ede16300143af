"""The resources of SPEC.md §1 as frozen dataclasses, shared by every layer.

Field names and shapes are the wire's (``API.md``): ``to_dict()`` is what the HTTP API returns
and what the CLI's ``--json`` prints, every field always present (``None`` as ``null``). SQL rows
never leave ``mnemofs.store``; these do.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Literal, NewType, TypeVar

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
Operation = Literal["created", "modified", "deleted"]  # a rename is "modified" (new path)
OPERATIONS: tuple[Operation, ...] = ("created", "modified", "deleted")
View = Literal["basic", "full"]
ActorType = Literal["session_actor", "api_actor", "user_actor", "service_account_actor"]

STORE_PREFIX = "memstore_"
MEMORY_PREFIX = "mem_"
VERSION_PREFIX = "memver_"
SESSION_PREFIX = "sess_"
API_KEY_PREFIX = "apikey_"
TOKEN_PREFIX = "sesstok_"
POOL_PREFIX = "pool_"
USER_ACTOR_PREFIX = "user:"  # how a user actor is stored (other words: service accounts)


# Crockford's base32, two characters (10 bits) at a time.
_BASE32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _BASE32 for b in _BASE32]


_last_ulid = 0
_ulid_lock = threading.Lock()


def new_ulid() -> str:
    """A ULID: 48 bits of Unix milliseconds and 80 random bits in 26 characters of Crockford's
    base32, monotonic within this process (a second one in the same millisecond is the first
    plus one), so ids sort in creation order. Every save makes two: this takes ~3 µs where
    the python-ulid package took ~15."""
    global _last_ulid
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    with _ulid_lock:
        if value >> 80 <= _last_ulid >> 80:
            value = _last_ulid + 1
        _last_ulid = value
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(120, -1, -10)])


def new_id(prefix: str) -> str:
    """A fresh id: the resource's prefix and a ULID (sortable by creation time)."""
    return prefix + new_ulid()


class _Resource:
    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The wire's JSON shape: ``type`` first, then every field."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return {"type": self.type, **{k: _plain(v) for k, v in data.items()}}


def _plain(value: Any) -> Any:
    if isinstance(value, _Resource | Actor):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


_ACTOR_ID_FIELD: dict[str, str] = {
    "session_actor": "session_id",
    "api_actor": "api_key_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


_ACTOR_LABEL = {"session_actor": "session ", "api_actor": "API key ", "user_actor": "user "}


@dataclass(frozen=True, slots=True)
class Actor:
    """Who wrote or redacted a version: a session (a mount, sync or session token), an API key,
    a user, or a service account (mnemofs's own tools: ``cli``, ``api``, ``evict``...).

    Stored as one string (``memory_versions.actor``): the session or key id as is, a user as
    ``user:<id>``, any other word a service account."""

    type: ActorType
    id: str

    @classmethod
    def from_stored(cls, value: str) -> Actor:
        if value.startswith(SESSION_PREFIX):
            return cls("session_actor", value)
        if value.startswith(API_KEY_PREFIX):
            return cls("api_actor", value)
        if value.startswith(USER_ACTOR_PREFIX):
            return cls("user_actor", value[len(USER_ACTOR_PREFIX) :])
        return cls("service_account_actor", value)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Actor | None:
        """The wire's actor object (``to_dict``'s shape) back, or None."""
        if not data:
            return None
        kind = data["type"]
        return cls(kind, data[_ACTOR_ID_FIELD[kind]])

    @property
    def label(self) -> str:
        """For people: ``session sess_...``, ``API key apikey_...``, ``user alice``, ``cli``."""
        return _ACTOR_LABEL.get(self.type, "") + self.id

    @property
    def stored(self) -> str:
        return USER_ACTOR_PREFIX + self.id if self.type == "user_actor" else self.id

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, _ACTOR_ID_FIELD[self.type]: self.id}


@dataclass(frozen=True, slots=True)
class MemoryStore(_Resource):
    id: StoreId
    name: str
    description: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    archived_at: str | None
    # mnemofs's own fields, beside the wire's (clients ignore fields they do not know):
    memory_count: int
    kind: StoreKind = "memory"
    owner: str = ""  # the end user it belongs to; "" for a general store
    on_full: OnFull = "refuse"  # what a create does when the store is full
    secrets: SecretsPolicy = "refuse"  # whether a save holding a credential is refused
    max_memories: int | None = None  # the store's own cap (None: the global limit)
    max_content_bytes: int | None = None  # the store's own cap per memory (None: global)
    pool_id: str | None = None  # the capacity pool it shares its capacity with

    type = "memory_store"


@dataclass(frozen=True, slots=True)
class CapacityPool(_Resource):
    """Stores sharing one capacity: at most ``max_memories`` over all of them; a create in a
    full pool is refused, or with ``evict-lru`` evicts the pool's least recently accessed
    memory first. ``memory_count`` is the pool's live memories now."""

    id: str
    name: str
    max_memories: int
    on_full: OnFull
    created_at: str
    memory_count: int
    memory_store_ids: list[StoreId]

    type = "capacity_pool"


@dataclass(frozen=True, slots=True)
class Memory(_Resource):
    """A live memory. ``content`` is ``None`` in the basic view (list entries by default)."""

    id: MemoryId
    memory_store_id: StoreId
    path: str
    content_sha256: str
    content_size_bytes: int
    memory_version_id: VersionId  # the head: the version holding the current content
    created_at: str
    updated_at: str
    content: str | None = None

    type = "memory"

    def in_view(self, view: View) -> Memory:
        """This memory as ``view`` shows it: without content in the basic view."""
        return self if view == "full" or self.content is None else replace(self, content=None)


@dataclass(frozen=True, slots=True)
class MemoryPrefix(_Resource):
    """A directory in a depth-1 listing: implied by memories under it, or made by mkdir."""

    path: str

    type = "memory_prefix"


@dataclass(frozen=True, slots=True)
class MemoryVersion(_Resource):
    """One immutable change. ``content`` is ``None`` in the basic view, once redacted, and for
    ``deleted`` (the version before it holds what was deleted); the hash and size are ``None``
    for the last two, and ``path`` only once redacted."""

    id: VersionId
    memory_store_id: StoreId
    memory_id: MemoryId
    operation: Operation
    path: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    created_at: str
    created_by: Actor | None
    redacted_at: str | None = None
    redacted_by: Actor | None = None
    content: str | None = None

    def in_view(self, view: View) -> MemoryVersion:
        """This version as ``view`` shows it: without content in the basic view."""
        return self if view == "full" or self.content is None else replace(self, content=None)

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
    """A session and its store attachments. ``fields`` are what its creator sent beside the
    resources (``agent``, ``environment_id``, ``metadata``, ``title``...), kept and returned."""

    id: SessionId
    created_at: str
    ended_at: str | None
    mount_root: str
    resources: tuple[Attachment, ...]
    user_id: str = ""  # the end user the session acts for; "" for none
    fields: Mapping[str, Any] = field(default_factory=dict)

    type = "session"

    def to_dict(self) -> dict[str, Any]:
        """The wire's session: every field the official SDK requires of one (the agent is a
        snapshot made from what was sent: an id, or an agent reference), then mnemofs's own."""
        sent = dict(self.fields)
        agent = sent.pop("agent", None)
        snapshot: dict[str, Any] = {
            "type": "agent",
            "id": "",
            "name": "",
            "description": None,
            "version": 1,
            "model": {"id": "unknown"},
            "system": None,
            "execution_identity": {"type": "service_account"},
            "mcp_servers": [],
            "skills": [],
            "tools": [],
            "multiagent": None,
        }
        if isinstance(agent, str):
            snapshot.update(id=agent, name=agent)
        elif isinstance(agent, Mapping):
            snapshot.update({k: v for k, v in agent.items() if k != "type"})
            snapshot["name"] = snapshot["name"] or snapshot["id"]
        return {
            **sent,
            "type": self.type,
            "id": self.id,
            "agent": snapshot,
            "environment_id": sent.get("environment_id") or "",
            "metadata": sent.get("metadata") or {},
            "title": sent.get("title"),
            "vault_ids": sent.get("vault_ids") or [],
            "outcome_evaluations": [],
            "stats": {},
            "usage": {},
            "status": "terminated" if self.ended_at else "idle",
            "created_at": self.created_at,
            "updated_at": self.ended_at or self.created_at,
            "archived_at": None,
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
    memory_version_id: VersionId
    path: str
    line: int
    kind: str

    type = "secret_finding"


@dataclass(frozen=True, slots=True)
class Deleted(_Resource):
    """What a delete returns: the id and ``memory_deleted`` or ``memory_store_deleted``."""

    id: str
    kind: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.kind}


@dataclass(frozen=True, slots=True)
class ApiKey(_Resource):
    """An admin credential. ``key`` (the secret) is set only in what ``create`` returns: the
    database keeps its hash alone."""

    id: str
    name: str
    created_at: str
    revoked_at: str | None
    key: str | None = None

    type = "api_key"


@dataclass(frozen=True, slots=True)
class SessionToken(_Resource):
    """A bearer credential that reaches one session and its stores only. ``token`` is set only
    in what ``create`` returns."""

    id: str
    session_id: SessionId
    created_at: str
    token: str | None = None

    type = "session_token"


@dataclass(frozen=True, slots=True)
class SearchHit(_Resource):
    """A live memory that matched a search, best first; ``snippet`` marks matches ``[like
    this]``; ``score`` only orders hits of one search."""

    memory_id: MemoryId
    memory_store_id: StoreId
    path: str
    snippet: str
    score: float
    mount_path: str | None = None  # a session search: where the agent finds it

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
class PathHistory:
    """Everything that was ever at one path, for the mount's ``.history`` (issue 19): the
    versions of each memory whose last path it is (live, or deleted there), oldest first, and
    the names one level below it that have history of their own."""

    versions: tuple[HistoryEntry, ...]
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One version as ``.history`` shows it: its stored operation (``renamed`` included),
    time, size, and whether it was redacted (then it has no content)."""

    version_id: VersionId
    memory_id: MemoryId
    operation: str
    created_at: str
    size_bytes: int
    redacted: bool


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of a store's change feed: a version and its position (``seq``)."""

    seq: int
    version: MemoryVersion


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing: ``data`` and the opaque ``next_page`` cursor (``None`` on the
    last page). Iterating walks this page and every following one."""

    data: list[T]
    next_page: str | None
    _fetch_next: Callable[[str], Page[T]] | None = field(default=None, repr=False, compare=False)

    @property
    def has_more(self) -> bool:
        return self.next_page is not None

    def __iter__(self) -> Iterator[T]:
        page: Page[T] = self
        while True:
            yield from page.data
            if page.next_page is None or page._fetch_next is None:
                return
            page = page._fetch_next(page.next_page)

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": [item.to_dict() for item in self.data],  # type: ignore[attr-defined]
            "next_page": self.next_page,
        }
