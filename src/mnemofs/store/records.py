"""A store as a stream of records: what an export holds and an import takes (issue 18).

The records are the store's own rows, in the order an import needs them: the store, its
explicit directories, every version in commit order, then every live memory (its head and
times). ``mnemofs.archive`` turns them into lines of a file and back; this module only says
what each one is and what makes one valid. ``line`` is where a record was read (0 when it was
not read from a file), so an error can name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import InvalidRequest, MnemofsError
from mnemofs.models import MEMORY_PREFIX, STORE_PREFIX, VERSION_PREFIX
from mnemofs.paths import validate_path
from mnemofs.store.rows import (
    _no_nul,
    _validate_metadata,
    _validate_on_full,
    _validate_secrets,
    _validate_store_name,
    _validate_user,
)

Operation = Literal["created", "modified", "renamed", "deleted"]
OPERATIONS = ("created", "modified", "renamed", "deleted")
# The stored timestamp format (schema.py): UTC, milliseconds, Z.
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


@dataclass(frozen=True, slots=True)
class StoreRecord:
    id: str
    name: str
    description: str
    metadata: dict[str, str]
    kind: str
    owner: str
    on_full: str
    secrets: str
    created_at: str
    updated_at: str
    archived_at: str | None
    pruned_before: str | None = None  # history before this was pruned (restore refuses it)
    max_memories: int | None = None  # the store's own caps (issue 20)
    max_content_bytes: int | None = None
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class DirectoryRecord:
    path: str
    created_at: str
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class VersionRecord:
    id: str
    memory_id: str
    operation: Operation
    path: str
    content: str | None
    content_sha256: str | None
    size_bytes: int
    created_at: str
    actor: str
    redacted_at: str | None = None
    redacted_by: str | None = None
    folded_id: str | None = None
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: str
    path: str
    content_sha256: str
    size_bytes: int
    created_at: str
    updated_at: str
    accessed_at: str | None
    head_version_id: str
    line: int = field(default=0, compare=False)


Record = StoreRecord | DirectoryRecord | VersionRecord | MemoryRecord


class BadRecord(InvalidRequest):
    """A record that cannot be imported; the message names its line."""


def where(record: Any) -> str:
    return f"line {record.line}: " if record.line else ""


def _bad(record: Any, message: str) -> BadRecord:
    return BadRecord(f"{where(record)}{message}")


def check_id(record: Any, value: str, prefix: str, what: str) -> None:
    if not value.startswith(prefix) or not _ULID.match(value[len(prefix) :]):
        raise _bad(record, f"{what} {value!r} is not a {prefix} id")


def check_time(record: Any, value: str | None, what: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not _TIME.match(value):
        raise _bad(record, f"{what} {value!r} is not a timestamp like 2026-01-31T12:00:00.000Z")


def check_store(record: StoreRecord) -> None:
    try:
        check_id(record, record.id, STORE_PREFIX, "store id")
        _validate_store_name(record.name)
        _validate_metadata(record.metadata)
        _validate_on_full(record.on_full)
        _validate_secrets(record.secrets)
        _validate_user(record.owner, "owner")
        if record.kind not in ("memory", "journal"):
            raise InvalidRequest(f"kind must be memory or journal, got {record.kind!r}")
        if not isinstance(record.description, str):
            raise InvalidRequest("description must be a string")
        _no_nul(record.description, "description")  # its length is kept (SPEC.md)
    except BadRecord:
        raise
    except MnemofsError as exc:
        raise _bad(record, f"store: {exc.message}") from None
    check_time(record, record.created_at, "created_at")
    check_time(record, record.updated_at, "updated_at")
    check_time(record, record.archived_at, "archived_at", optional=True)
    check_time(record, record.pruned_before, "pruned_before", optional=True)


def check_directory(record: DirectoryRecord) -> None:
    path = record.path
    if not path.endswith("/") or path == "/":
        raise _bad(record, f"directory {path!r} must end with '/' and not be the root")
    try:
        validate_path(path[:-1])
    except MnemofsError as exc:
        raise _bad(record, f"directory {path!r}: {exc.message}") from None
    check_time(record, record.created_at, "created_at")


def check_version(record: VersionRecord) -> None:
    """One version's own rules: ids, operation, path, and content against hash and size."""
    check_id(record, record.id, VERSION_PREFIX, "version id")
    check_id(record, record.memory_id, MEMORY_PREFIX, "memory id")
    if record.folded_id is not None:
        check_id(record, record.folded_id, MEMORY_PREFIX, "folded_id")
    what = f"version {record.id}"
    if record.operation not in OPERATIONS:
        raise _bad(record, f"{what}: operation {record.operation!r} is not one of {OPERATIONS}")
    try:
        validate_path(record.path)
    except MnemofsError as exc:
        raise _bad(record, f"{what}: {exc.message}") from None
    check_time(record, record.created_at, "created_at")
    check_time(record, record.redacted_at, "redacted_at", optional=True)
    if not isinstance(record.actor, str) or not record.actor:
        raise _bad(record, f"{what}: actor must be a non-empty string")
    if not isinstance(record.size_bytes, int) or not 0 <= record.size_bytes <= (
        limits.MAX_CONTENT_BYTES
    ):
        raise _bad(record, f"{what}: size_bytes {record.size_bytes!r} is out of range")
    if record.content is None:
        if record.content_sha256 is not None:
            raise _bad(record, f"{what}: a content_sha256 but no content")
        if record.operation != "deleted" and record.redacted_at is None:
            raise _bad(record, f"{what}: no content, yet neither deleted nor redacted")
        return
    if record.operation == "deleted":
        raise _bad(record, f"{what}: a deletion with content")
    if record.redacted_at is not None:
        raise _bad(record, f"{what}: redacted, yet with content")
    try:
        content = Content.from_text(record.content)
    except MnemofsError as exc:
        raise _bad(record, f"{what}: {exc.message}") from None
    if content.sha256 != record.content_sha256:
        raise _bad(record, f"{what}: content does not match its content_sha256 (corrupted?)")
    if content.size != record.size_bytes:
        raise _bad(
            record,
            f"{what}: content is {content.size} bytes but size_bytes says {record.size_bytes}",
        )


def check_memory(record: MemoryRecord) -> None:
    check_id(record, record.id, MEMORY_PREFIX, "memory id")
    check_id(record, record.head_version_id, VERSION_PREFIX, "head_version_id")
    try:
        validate_path(record.path)
    except MnemofsError as exc:
        raise _bad(record, f"memory {record.id}: {exc.message}") from None
    check_time(record, record.created_at, "created_at")
    check_time(record, record.updated_at, "updated_at")
    check_time(record, record.accessed_at, "accessed_at", optional=True)
