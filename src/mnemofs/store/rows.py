"""The leaves of the service: timestamps, value checks, cursors, rows turned into model objects,
the secrets screen and the column lists. No transaction here."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import (
    ContentTooLarge,
    InvalidRequest,
    PathConflict,
    SecretDetected,
)
from mnemofs.models import (
    ON_FULL_POLICIES,
    SECRETS_POLICIES,
    Access,
    Actor,
    Memory,
    MemoryId,
    MemoryStore,
    MemoryVersion,
    OnFull,
    SecretsPolicy,
    StoreId,
    VersionId,
    View,
)
from mnemofs.paths import ROOT, ancestor_prefixes, parent_prefix, prefix_upper_bound
from mnemofs.secrets import find_secrets
from mnemofs.store.directories import KEEP_DIRECTORY

JOURNAL_PATH = "/journal.jsonl"  # where a journal store's newest records are

EVICT_ACTOR = "evict"  # the actor of versions that 'evict-lru' writes

# One row by its id, and only if it is in store :store. The store is compared as an expression:
# with two plain equalities PostgreSQL picks between the id's index and the (store_id, ...) one
# by its statistics, and when they say the table is almost empty (a VACUUM just after a store
# was emptied) it may take the store's index and walk every row of the store to find the one id
# (1.4 ms for 2,000 memories instead of 0.02; issue 17).
BY_ID_IN_STORE = "id = :id AND store_id || '' = :store"
SEQ_END = 2**63 - 1  # after every version's seq


class SeqRange(NamedTuple):
    """A ``WHERE`` for a store's versions with ``:lo < seq < :hi`` and its two orders."""

    where: str
    oldest_first: str
    newest_first: str


def store_seq_range(dialect: str) -> SeqRange:
    """The versions of store :store with ``:lo < seq < :hi`` (``SEQ_END``: no bound). On
    PostgreSQL a range of the (store_id, seq) index by row comparison, ordered by both its
    columns: with ``store_id = :store AND seq > :lo ORDER BY seq`` the planner may walk the
    seq index from :lo instead, taking the store's versions to be spread over all versions (it
    assumes the two columns independent), and a store with no change since :lo then had every
    later version of every other store read to find none (6,053 rows, 2.5 ms, where the index
    reads 3 pages; a sync worker asks that of every store on every pass). An equality would
    let the planner drop store_id from the order and choose so again. SQLite plans the plain
    form well and row comparisons worse."""
    if dialect == "postgresql":
        return SeqRange(
            "(store_id, seq) > (:store, :lo) AND (store_id, seq) < (:store, :hi)",
            "store_id, seq",
            "store_id DESC, seq DESC",
        )
    return SeqRange("store_id = :store AND seq > :lo AND seq < :hi", "seq", "seq DESC")


# The search index takes in a process's saved changes once its writes pause (SEARCH_QUIET_S),
# or SEARCH_TRAIL_MAX_S after its last catch-up while they go on; a process with no writes of its
# own since then looks for other processes' leftovers every SEARCH_TRAIL_S. Every search catches
# up first, so none of this is ever seen by a reader (docs/decisions.md, "Search trails saves").
SEARCH_QUIET_S = 0.2
SEARCH_TRAIL_MAX_S = 2.0
SEARCH_TRAIL_S = 1.0
SEARCH_BATCH = 100  # changes taken into the index per transaction in the background
# PostgreSQL locks a batch's rows while it makes their vectors (~0.6 ms a row of 4 KiB of
# prose), and a save of one of them waits: with 100, saves racing a catch-up waited up to 66 ms.
SEARCH_BATCH_PG = 20
ACCESS_FLUSH_S = 1.0  # noted reads reach the database at least this often while reading

_SEARCH_WORD = re.compile(r"\w+")  # a query is its words; operators and quotes are not syntax

_MEMORY_COLS = (
    "id, store_id, path, content_sha256, size_bytes, created_at, updated_at, head_version_id"
)

_VERSION_COLS = (
    "id, store_id, memory_id, operation, path, content_sha256, size_bytes, created_at, actor, "
    "redacted_at, redacted_by"
)


_STORE_COLS = (
    "id, name, description, metadata, created_at, updated_at, archived_at, memory_count, kind, "
    "owner, on_full, secrets, max_memories, max_content_bytes, pool_id"
)


_second: tuple[int, str] = (-1, "")  # the last whole second ``utc_now`` wrote, as text


def utc_now() -> str:
    """Now as the spec's timestamp: UTC ISO-8601 with milliseconds. The date and time of day
    are made once a second: every change stamps its rows, and ``datetime``'s ``isoformat``
    took 3.3 µs in a loop of its own where this takes 0.8 (~10-14 µs in place, issue 17).
    Truncated to the millisecond, as ``isoformat`` does."""
    global _second
    now = time.time()
    whole = int(now)
    second = _second
    if second[0] != whole:  # one tuple, replaced whole: safe for threads
        second = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{second[1]}.{int((now - whole) * 1000):03d}Z"


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _validate_time(value: object, what: str) -> str | None:
    """An RFC 3339 bound (any offset, or a date) as the stored timestamp format, or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("z", "Z"))
        except ValueError:
            raise InvalidRequest(f"{what} {value!r} is not an RFC 3339 timestamp") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _timestamp(moment)


def sha256_hex(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def decode_content(data: bytes) -> str:
    """Bytes saved through a file as memory content; ``InvalidContent`` unless valid UTF-8."""
    return Content.from_bytes(data).text


def validate_content(content: object) -> str:
    """Return ``content`` if it may be stored: UTF-8 text without NUL, within the size limit."""
    return Content.from_text(content).text


def _validate_limit(limit: object, view: object = "basic") -> int:
    """A page size: 1..MAX_PAGE_LIMIT, or 1..MAX_FULL_PAGE_LIMIT with content (``view=full``)."""
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise InvalidRequest(f"limit must be an integer, got {limit!r}")
    most = limits.MAX_FULL_PAGE_LIMIT if _validate_view(view) == "full" else limits.MAX_PAGE_LIMIT
    if not 1 <= limit <= most:
        with_view = " with view=full" if most == limits.MAX_FULL_PAGE_LIMIT else ""
        raise InvalidRequest(f"limit {limit} is outside 1..{most}{with_view}")
    return limit


def _validate_view(view: object) -> View:
    if view not in ("basic", "full"):
        raise InvalidRequest(f"view {view!r} is not one of basic, full")
    return view


def _validate_metadata(
    metadata: object, current: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Store metadata: string pairs, at most MAX_METADATA_PAIRS. With ``current`` it is an
    update: merged into ``current``, where a ``None`` value deletes that key."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise InvalidRequest(f"metadata must be an object of string values, got {metadata!r}")
    merged = dict(current or {})
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= limits.MAX_METADATA_KEY_CHARS:
            raise InvalidRequest(
                f"metadata key {key!r} must be 1..{limits.MAX_METADATA_KEY_CHARS} characters"
            )
        if value is None and current is not None:
            merged.pop(key, None)
            continue
        if not isinstance(value, str) or len(value) > limits.MAX_METADATA_VALUE_CHARS:
            raise InvalidRequest(
                f"metadata value of {key!r} must be a string of at most "
                f"{limits.MAX_METADATA_VALUE_CHARS} characters, got {str(value)[:60]!r}"
            )
        merged[key] = value
    if len(merged) > limits.MAX_METADATA_PAIRS:
        raise InvalidRequest(
            f"metadata would hold {len(merged)} keys, over {limits.MAX_METADATA_PAIRS}"
        )
    return merged


def _encode_cursor(query: str, key: str | int) -> str:
    """An opaque ``next_page``: the listing key to continue after, bound to the query (its
    filters and page size) so that it cannot continue another one."""
    raw = json.dumps([query, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(query: str, cursor: str | None) -> Any:
    if cursor is None:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        got_query, key = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise InvalidRequest(f"page {cursor[:80]!r} is not a cursor a listing returned") from None
    if got_query != query:
        raise InvalidRequest(
            f"page {cursor[:80]!r} belongs to another query: resend the query that returned it"
        )
    return key


def _memory(row: Any, content: str | None = None) -> Memory:
    return Memory(
        id=MemoryId(row.id),
        memory_store_id=StoreId(row.store_id),
        path=row.path,
        content_sha256=row.content_sha256,
        content_size_bytes=row.size_bytes,
        memory_version_id=VersionId(row.head_version_id),
        created_at=row.created_at,
        updated_at=row.updated_at,
        content=content,
    )


def _version(row: Any, content: str | None = None) -> MemoryVersion:
    """A version row as the wire shows it: a rename is 'modified'; a redacted version has no
    path, hash or size; a deletion no hash or size."""
    redacted = row.redacted_at is not None
    deleted = row.operation == "deleted"
    return MemoryVersion(
        id=VersionId(row.id),
        memory_store_id=StoreId(row.store_id),
        memory_id=MemoryId(row.memory_id),
        operation="modified" if row.operation == "renamed" else row.operation,
        path=None if redacted else row.path,
        content_sha256=None if redacted or deleted else row.content_sha256,
        content_size_bytes=None if redacted or deleted else row.size_bytes,
        created_at=row.created_at,
        created_by=Actor.from_stored(row.actor) if row.actor else None,
        redacted_at=row.redacted_at,
        redacted_by=Actor.from_stored(row.redacted_by) if row.redacted_by else None,
        content=None if redacted or deleted else content,
    )


def _store(row: Any) -> MemoryStore:
    return MemoryStore(
        id=StoreId(row.id),
        name=row.name,
        description=row.description,
        metadata=json.loads(row.metadata),
        created_at=row.created_at,
        updated_at=row.updated_at,
        archived_at=row.archived_at,
        memory_count=row.memory_count,
        kind=row.kind,
        owner=row.owner,
        on_full=row.on_full,
        secrets=row.secrets,
        max_memories=row.max_memories,
        max_content_bytes=row.max_content_bytes,
        pool_id=row.pool_id,
    )


def _validate_store_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(f"store name must be a non-empty string, got {name!r}")
    if len(name) > limits.MAX_STORE_NAME_CHARS:
        raise InvalidRequest(
            f"store name {name[:40]!r}... is {len(name)} characters, over "
            f"{limits.MAX_STORE_NAME_CHARS}"
        )
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise InvalidRequest(f"store name {name!r} contains a control character")
    return name


def _validate_user(user: object, what: str) -> str:
    """An end user's id: up to ``MAX_USER_ID_CHARS`` printable characters; "" for none."""
    if user is None:
        return ""
    if not isinstance(user, str) or len(user) > limits.MAX_USER_ID_CHARS or not user.isprintable():
        raise InvalidRequest(
            f"{what} must be up to {limits.MAX_USER_ID_CHARS} printable characters, got {user!r}"
        )
    return user.strip()


def _validate_on_full(on_full: object) -> OnFull:
    if on_full not in ON_FULL_POLICIES:
        raise InvalidRequest(f"on_full {on_full!r} is not one of {', '.join(ON_FULL_POLICIES)}")
    return on_full  # type: ignore[return-value,unused-ignore]


def _validate_secrets(policy: object) -> SecretsPolicy:
    if policy not in SECRETS_POLICIES:
        raise InvalidRequest(f"secrets {policy!r} is not one of {', '.join(SECRETS_POLICIES)}")
    return policy  # type: ignore[return-value,unused-ignore]


class StoreLock(NamedTuple):
    """What locking a store for a change tells about it (``ServiceBase._change_store``):
    its secrets policy, its memory count after the change, its own cap on a memory's size and
    its capacity pool."""

    secrets: str
    memory_count: int
    max_content_bytes: int | None = None
    pool_id: str | None = None
    max_memories: int | None = None

    def has_room(self) -> bool:
        """One more memory fits, by this store's cap alone, and no pool has a say."""
        cap = limits.MAX_MEMORIES_PER_STORE if self.max_memories is None else self.max_memories
        return self.pool_id is None and self.memory_count < cap


def _screen(
    policy: str | StoreLock, store_id: str, path: str, content: str, known: str | None = None
) -> None:
    """Refuse ``content`` for ``path`` if it breaks the store's own rules: over its size cap, or
    holding a credential where the store refuses them (in the lines it adds to ``known``, the
    content it replaces)."""
    if isinstance(policy, StoreLock):
        cap = policy.max_content_bytes
        if cap is not None and len(content) > cap // 4 and len(content.encode()) > cap:
            raise ContentTooLarge(
                f"{path}: {len(content.encode())} bytes is over the cap of store {store_id}: "
                f"{cap} bytes per memory ('mnemofs stores update STORE --max-content-bytes N')"
            )
        policy = policy.secrets
    if policy != "refuse":
        return
    findings = find_secrets(content, known=known)
    if not findings:
        return
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    raise SecretDetected(
        f"{path}: not saved: it holds what looks like a credential ({findings[0]}{more}). "
        "Memories outlive the session and are read by other agents and users: remove it (name "
        "where it is kept instead, e.g. an environment variable). Store "
        f"{store_id} refuses secrets ('mnemofs stores update STORE --secrets allow' permits "
        "them).",
        findings,
    )


def _validate_description(description: object) -> str:
    if not isinstance(description, str):
        raise InvalidRequest(f"description must be a string, got {description!r}")
    if len(description) > limits.MAX_DESCRIPTION_CHARS:
        raise InvalidRequest(
            f"description is {len(description)} characters, over {limits.MAX_DESCRIPTION_CHARS}"
        )
    _no_nul(description, "description")
    return description


def _no_nul(text: str, what: str) -> None:
    """Text that is stored and shown holds no NUL, as content does not (PostgreSQL cannot
    store one; SQLite would, and a prompt or a shell would show the text cut there)."""
    if (at := text.find("\x00")) >= 0:
        raise InvalidRequest(f"{what} contains a NUL character at {at}")


def _precondition_hash(precondition: object, what: str = "precondition") -> str | None:
    """The hash a precondition demands: ``{"type": "content_sha256", "content_sha256": H}``
    (or ``H`` itself)."""
    if precondition is None:
        return None
    if isinstance(precondition, Mapping):
        if precondition.get("type", "content_sha256") != "content_sha256":
            raise InvalidRequest(
                f"precondition type {precondition.get('type')!r} is unknown "
                "(only 'content_sha256' exists)"
            )
        wanted = precondition.get("content_sha256")
    else:
        wanted = precondition
    if not isinstance(wanted, str) or len(wanted) != 64 or not _is_hex(wanted):
        raise InvalidRequest(f"{what} content_sha256 {wanted!r} is not a SHA-256 hex digest")
    return wanted.lower()


def _is_hex(value: str) -> bool:
    try:
        int(value, 16)
    except ValueError:
        return False
    return True


def _memories_at(paths: list[str], columns: str = "path, id") -> tuple[str, dict[str, str]]:
    """A query for the memories of store ``:store`` at any of ``paths``: one index lookup per
    path. (Not ``path IN (...)``: PostgreSQL's cached generic plan for that filtered the
    store's whole index when the table's statistics were taken while it was almost empty,
    ~5 ms instead of 0.1 for a store of a few thousand memories; issue 17.)"""
    params = {f"p{i}": v for i, v in enumerate(paths)}
    return " UNION ALL ".join(
        f"SELECT {columns} FROM memories WHERE store_id = :store AND path = :{k}" for k in params
    ), params


def _placeholders(name: str, values: list[str]) -> tuple[str, dict[str, str]]:
    """``:name0, :name1, ...`` and their parameters, for an IN list."""
    params = {f"{name}{i}": v for i, v in enumerate(values)}
    return ", ".join(":" + k for k in params), params


def _access(value: str) -> Access:
    if value == "read_only":
        return "read_only"
    return "read_write"


# A change over a memory's last save by the same service (``SavesMixin._save_over_last``): the
# store is locked and counted as ``ServiceBase._lock_and_count`` does, only while its rules are
# still the ones seen; the memory must still have the hash and path of that save.
_STORE_AS_SEEN = (
    "UPDATE memory_stores SET revision = revision + 1 WHERE id = :store "
    "AND archived_at IS NULL AND secrets = :secrets "
    "AND max_content_bytes IS NOT DISTINCT FROM :cap"
)
# A create in a store as seen (``SavesMixin._create_as_seen``): counted only while it has the
# same rules, room by its own cap, and no capacity pool (whose evictions take the careful way).
_STORE_WITH_ROOM = (
    "UPDATE memory_stores SET memory_count = memory_count + 1, "
    "revision = revision + 1 WHERE id = :store AND archived_at IS NULL AND secrets = :secrets "
    "AND max_content_bytes IS NOT DISTINCT FROM :cap AND pool_id IS NULL "
    "AND memory_count < COALESCE(max_memories, :max)"
)
# A new memory's row (``ServiceBase._insert_memory``): the table with its columns, and their
# values (``_version_params``).
_NEW_MEMORY = (
    "memories (id, store_id, path, content_sha256, size_bytes, created_at, updated_at, "
    "head_version_id, accessed_at)",
    ":memory, :store, :path, :sha, :size, :now, :now, :version, :now",
)
# mkdir, rmdir and a delete on PostgreSQL (``MemoriesMixin``): the store's row locked and
# counted as ``_lock_and_count`` does, live unless ``archived_ok`` (a delete through the API).
_STORE_COUNTED = (
    "UPDATE memory_stores SET memory_count = memory_count + :delta, "
    "revision = revision + 1 WHERE id = :store{live}"
)
_STORE_LIVE = " AND archived_at IS NULL"


def _locked(lock: str) -> str:
    """A ``Tx.guard`` that ``lock`` (one of the UPDATEs above) changed the store's row."""
    return f"WITH s AS ({lock} RETURNING id) SELECT 1 / count(*)::int FROM s"


# What a write left its store at (``ServiceBase.take_moved``), asked in its own transaction.
_MOVED = (
    "SELECT revision, (SELECT MAX(v.seq) FROM memory_versions v WHERE v.store_id = :id) AS last "
    "FROM memory_stores WHERE id = :id"
)
# The memory row a change over the last save assumes (the rows a save, a rename or a delete
# of it changes, on PostgreSQL): still the hash, path and creation of that save (``_as_saved``).
_AS_SAVED = (
    "id = :memory AND store_id = :store AND content_sha256 = :was_sha AND path = :was_path "
    "AND created_at = :was_created"
)


class _Assumed(NamedTuple):
    """A memory's row as a change over its last save assumes it (what ``_apply_update``
    reads): what a service remembers of its last save of a memory (``_remember``)."""

    id: str
    path: str
    content_sha256: str
    content: str
    size_bytes: int
    created_at: str

    @classmethod
    def of(cls, memory: Memory) -> _Assumed:
        return cls(
            memory.id,
            memory.path,
            memory.content_sha256,
            memory.content or "",
            memory.content_size_bytes,
            memory.created_at,
        )


def _as_saved(last: _Assumed, keep_directory: bool = False) -> tuple[str, dict[str, Any]]:
    """``_AS_SAVED``'s parameters, the memory as ``last`` remembers it; with
    ``keep_directory``, also a writable CTE that keeps the directory it leaves (``""`` when
    that is the root) and its parameter."""
    params = {"was_sha": last.content_sha256, "was_path": last.path, "was_created": last.created_at}
    parent = parent_prefix(last.path)
    if not keep_directory or parent == ROOT:
        return "", params
    most = limits.MAX_DIRECTORIES_PER_STORE
    return f", k AS ({KEEP_DIRECTORY})", params | {"parent": parent, "most": most}


def _path_query(store_id: str, path: str, ignore: str | None) -> tuple[str, dict[str, str]]:
    """``ServiceBase._path_check``'s one query: memories at ``path`` or at an ancestor (as a
    file), the first memory under it (not ``ignore``), the first explicit directory at or under
    it; every row it answers is a conflict, but for ``ignore`` itself."""
    at, params = _memories_at([path, *(p[:-1] for p in ancestor_prefixes(path))])
    as_dir = path + "/"
    params |= {"store": store_id, "lo": as_dir, "hi": prefix_upper_bound(as_dir)}
    params["ignore"] = ignore or ""
    return (
        f"{at} UNION ALL SELECT * FROM (SELECT path, id FROM memories WHERE store_id = :store "
        "AND path >= :lo AND path < :hi AND id != :ignore ORDER BY path LIMIT 1) AS under "
        "UNION ALL SELECT * FROM (SELECT path, NULL AS id FROM directories "
        "WHERE store_id = :store AND path >= :lo AND path < :hi ORDER BY path LIMIT 1) AS d",
        params,
    )


def _path_free(store_id: str, path: str, ignore: str | None) -> tuple[str, dict[str, Any]]:
    """A condition (in a change's writes, after the store's lock) that ``_path_query`` answers
    no row but ``ignore``'s own:
    the path check a create, a rename or a mkdir would have made finds nothing in the way."""
    query, params = _path_query(store_id, path, ignore)
    free = f"NOT EXISTS (SELECT 1 FROM ({query}) AS c WHERE c.id IS DISTINCT FROM :ignore)"
    return free, {**params}


def _path_verdict(
    rows: list[Any], path: str, as_dir: str, ignore: str | None, existing_ok: bool
) -> str | None:
    """What the rows of ``_path_check``'s query say (see there)."""
    for row in rows:
        if row.id is not None and row.id == ignore:
            continue
        if row.path == path:
            if existing_ok and row.id is not None:
                return str(row.id)
            raise PathConflict(f"a memory already exists at {path!r} ({row.id})")
        if row.id is not None and not row.path.startswith(as_dir):
            raise PathConflict(f"{row.path!r} is a memory, so {path!r} cannot be under it")
        raise PathConflict(f"{path!r} is a directory (it holds {row.path!r})")
    return None
