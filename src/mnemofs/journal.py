"""The turn journal: one JSON record per agent turn, appended to a journal store.

An agent framework calls a ``JournalHook`` after every completed or failed turn; the hook
truncates the long texts and hands the record to its backend, by default ``StoreJournal``, which
appends one line to the store's ``/journal.jsonl`` (rotating full files to
``journal-<time>.jsonl`` beside it; see ``MemoryService.append_journal``). Agents read the
journal through a read_only mount; the prompt note tells them records are untrusted history.

A record has the fields ``at``, ``sessionId``, ``channelId``, ``status`` (``completed`` or
``failed``), ``title``, ``userMessage``, ``result`` and ``usage``; any other field is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from mnemofs import limits
from mnemofs.errors import InvalidRequest
from mnemofs.models import Memory
from mnemofs.store import MemoryService

DEFAULT_MAX_TEXT_LENGTH = limits.DEFAULT_JOURNAL_TEXT_CHARS
FIELDS = ("at", "sessionId", "channelId", "status", "title", "userMessage", "result", "usage")
STATUSES = ("completed", "failed")
TRUNCATED = ("userMessage", "result")


@dataclass(frozen=True)
class SessionContext:
    """What a backend learns about where it runs (the seed's ``{stateRoot, agentName}``)."""

    state_root: str | None = None
    agent_name: str | None = None


@runtime_checkable
class MemoryBackend(Protocol):
    """Where records go. ``prepare_session(context)`` is optional and runs when a session
    starts; ``append_turn`` receives each record, already validated and truncated."""

    def append_turn(self, record: Mapping[str, Any], context: SessionContext) -> None: ...


def truncate(text: str, limit: int) -> str:
    """The first ``limit`` characters (code points: a UTF-8 sequence is never split)."""
    return text[:limit]


def make_record(
    record: Mapping[str, Any], *, max_text_length: int = DEFAULT_MAX_TEXT_LENGTH
) -> dict[str, Any]:
    """A valid record in field order, with ``userMessage`` and ``result`` truncated."""
    if not isinstance(record, Mapping):
        raise InvalidRequest(f"a journal record is a JSON object, got {type(record).__name__}")
    if not isinstance(max_text_length, int) or max_text_length < 0:
        raise InvalidRequest(f"max_text_length must be >= 0, got {max_text_length!r}")
    unknown = sorted(set(record) - set(FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown journal field(s) {unknown}; the fields are {list(FIELDS)}")
    out: dict[str, Any] = {}
    at = record.get("at") or _now()
    if not isinstance(at, str):
        raise InvalidRequest(f"'at' must be an ISO-8601 string, got {at!r}")
    out["at"] = at
    for key in ("sessionId", "channelId"):
        value = record.get(key)
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"{key!r} is required (a non-empty string), got {value!r}")
        out[key] = value
    status = record.get("status")
    if status not in STATUSES:
        raise InvalidRequest(f"'status' must be 'completed' or 'failed', got {status!r}")
    out["status"] = status
    title = record.get("title")
    if title is not None:
        if not isinstance(title, str):
            raise InvalidRequest(f"'title' must be a string, got {title!r}")
        out["title"] = truncate(title, max_text_length)
    for key in TRUNCATED:
        value = record.get(key, "")
        if not isinstance(value, str):
            raise InvalidRequest(f"{key!r} must be a string, got {type(value).__name__}")
        out[key] = truncate(value, max_text_length)
    usage = record.get("usage")
    if usage is not None:
        if not isinstance(usage, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in usage.items()
        ):
            raise InvalidRequest(f"'usage' must map token kinds to integers, got {usage!r}")
        out["usage"] = dict(usage)
    return out


def record_line(record: Mapping[str, Any]) -> str:
    """The record as one JSONL line (UTF-8 kept as is, no spaces)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


class StoreJournal:
    """The default backend: a journal store in mnemofs."""

    def __init__(self, service: MemoryService, store_id: str, *, actor: str = "journal") -> None:
        self.service = service
        self.store_id = store_id
        self.actor = actor

    def prepare_session(self, context: SessionContext) -> None:
        """Check, at the start of a session, that the store exists and is a journal."""
        store = self.service.get_store(self.store_id)
        if store.kind != "journal":
            raise InvalidRequest(f"memory store {store.name!r} ({store.id}) is not a journal")

    def append_turn(self, record: Mapping[str, Any], context: SessionContext) -> None:
        self.append(record)

    def append(self, record: Mapping[str, Any]) -> Memory:
        """Append an already valid record; the journal file as it is now."""
        return self.service.append_journal(self.store_id, record_line(record), actor=self.actor)


class JournalHook:
    """What an agent framework calls: ``prepare_session()`` when a session starts (optional),
    ``append_turn(record)`` after each completed or failed turn."""

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        max_text_length: int = DEFAULT_MAX_TEXT_LENGTH,
        context: SessionContext | None = None,
    ) -> None:
        self.backend = backend
        self.max_text_length = max_text_length
        self.context = context or SessionContext()

    def prepare_session(self) -> None:
        prepare = getattr(self.backend, "prepare_session", None)
        if prepare is not None:
            prepare(self.context)

    def append_turn(self, record: Mapping[str, Any]) -> None:
        self.backend.append_turn(
            make_record(record, max_text_length=self.max_text_length), self.context
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
