"""Domain errors: every refusal the store makes, typed, with a message naming the offending value.

No errno here: the filesystem adapter and the CLI each map these at their own boundary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


class MnemofsError(Exception):
    """Base of every refusal. ``type`` is the spec's error name (``invalid_request``...)."""

    type = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message}


class InvalidRequest(MnemofsError):
    """The request itself is malformed: a bad path, an unknown option, a value out of range."""

    type = "invalid_request"


class NotFound(MnemofsError):
    """A store, memory, version or session that does not exist."""

    type = "not_found"


class Conflict(MnemofsError):
    """The request collides with the current state (an existing path, a non-empty directory...)."""

    type = "conflict"


class PathConflict(Conflict):
    """A memory already exists at the path a create (or a rename) asked for."""


class PreconditionFailed(MnemofsError):
    """A ``content_sha256`` precondition no longer matches the stored content."""

    type = "precondition_failed"


class LimitExceeded(MnemofsError):
    """A limit from ``mnemofs.limits`` would be passed (content size, memories per store...)."""

    type = "limit_exceeded"


class StoreArchived(MnemofsError):
    """The store is archived: read-only forever, and it cannot be attached to new sessions."""

    type = "store_archived"


class Unavailable(MnemofsError):
    """The database failed or could not be reached; nothing was changed by the failed call."""

    type = "unavailable"


class StorageFull(Unavailable):
    """The database has no room left (its disk is full); nothing was changed by the failed
    call. A filesystem says ENOSPC."""


class AccessRevoked(Unavailable):
    """The server refused the credential (a revoked token, an ended session): nothing through
    it will work again. A filesystem says EACCES."""

    type = "access_revoked"


class ContentTooLarge(LimitExceeded):
    """Content over ``MAX_CONTENT_BYTES``: a limit, singled out because a filesystem says EFBIG."""


class StoreFull(LimitExceeded):
    """A new memory would pass ``MAX_MEMORIES_PER_STORE``: a filesystem says ENOSPC."""


class InvalidContent(InvalidRequest):
    """Content that is not valid UTF-8 text: a filesystem says EILSEQ."""


class InvalidName(InvalidRequest):
    """A file name that is not UTF-8 text in Normalization Form C: a filesystem says EILSEQ."""


class SecretDetected(InvalidRequest):
    """Content that holds a credential, in a store that refuses them: a filesystem says EACCES.
    ``findings`` name each credential's kind and line, never the credential."""

    def __init__(self, message: str, findings: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.findings = list(findings)


class NameTooLong(InvalidRequest):
    """A path segment or a whole path over its byte limit: a filesystem says ENAMETOOLONG."""


ERROR_TYPES: tuple[type[MnemofsError], ...] = (
    InvalidRequest,
    NotFound,
    Conflict,
    PreconditionFailed,
    LimitExceeded,
    StoreArchived,
)


class WriteWouldWait(Exception):
    """A write transaction of a thread that must not wait (``write_at_once``) found a lock it
    needs taken (SQLite's write lock or its process's turn to write; a PostgreSQL row's), or
    its database or server unreachable for a moment (``Patience.unreachable``); it did
    nothing. Not a refusal (no ``MnemofsError``): the caller makes its call again a little
    later (``Patience``)."""


# How a remote mount asks the server for ``write_at_once`` (a change's request only): this
# header, with what try it is (``Patience.attempt``). A server's ``WriteWouldWait`` then comes
# back as a 503 whose ``error.mnemofs_error`` is "WriteWouldWait", and the mount asks again.
WRITE_AT_ONCE_HEADER = "mnemofs-write-at-once"
FIRST_TRY, TRY_AGAIN, LAST_TRY = "1", "again", "last"
# The reply to such a change names what it left its store at (``ServiceBase.take_moved``):
# "<store id> <revision> <end of the change feed>". A mount then takes the revisions its own
# changes made as seen, rather than read those changes back.
MOVED_HEADER = "mnemofs-moved"


class Patience:
    """How a caller of ``write_at_once`` (a server's event loop, a mount's) waits for a lock
    while it serves others, from the first ``WriteWouldWait``: ``pause`` says how long before
    the call is made again, 1 ms doubling up to ``PAUSE_MAX_S`` (the rhythm of SQLite's own
    busy handler); once ``over`` (``LOCKED_S``, what SQLite's busy timeout came to) the call is
    made a last time with ``write_at_once(last=True)``, whose write, the lock still taken, is
    refused ``Unavailable`` by the store, nothing changed."""

    PAUSE_MAX_S = 0.05
    LOCKED_S = 30.0
    # A database or server that cannot be reached (nothing sent) is waited for this long from
    # when it could not be: what a restart takes, a service's or PostgreSQL's. Changes made
    # later in a longer outage are refused at once.
    UNREACHABLE_S = 10.0

    def __init__(self) -> None:
        self._pause = 0.0
        self._since = time.monotonic()

    @property
    def over(self) -> bool:
        return time.monotonic() - self._since >= self.LOCKED_S

    def pause(self) -> float:
        self._pause = min(self._pause * 2, self.PAUSE_MAX_S) if self._pause else 0.001
        return self._pause

    @staticmethod
    def attempt(patience: Patience | None) -> str:
        """The next try of a call: ``FIRST_TRY`` before any ``WriteWouldWait`` (no patience
        yet), ``LAST_TRY`` once ``over``, ``TRY_AGAIN`` between: ``write_at_once(again=...,
        last=...)``."""
        if patience is None:
            return FIRST_TRY
        return LAST_TRY if patience.over else TRY_AGAIN

    @classmethod
    def waits_out(cls, away: float | None) -> bool:
        """Whether a database or server that has been away ``away`` seconds (None: it is not)
        is still waited for: the outage may be a restart."""
        return away is not None and away < cls.UNREACHABLE_S

    @classmethod
    def unreachable(cls, refusal: Exception, attempt: object, away: float | None) -> Exception:
        """What a write that could not reach its database or server raises, nothing sent:
        for a first write at once (``attempt``, its ``write_at_once``; false when there is
        none) while ``waits_out(away)``, ``WriteWouldWait``, so that a mount waits out a
        restart while it serves the rest; ``refusal`` otherwise, and on the last try."""
        if attempt and attempt != LAST_TRY and cls.waits_out(away):
            return WriteWouldWait(f"{refusal} (waiting for it: {away:.1f} s)")
        return refusal
