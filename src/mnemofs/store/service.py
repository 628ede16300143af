"""The service: every rule of SPEC.md §1–3 about stores, memories, versions and sessions.

Concurrency contract
- Each public method is one database transaction (``Database.run``); nothing is held between
  calls, so one ``MemoryService`` may be shared by threads, each using its own connection.
- Every change to a store's memories or directories starts by updating the store's row
  (``_change_store``), which locks it until commit (on SQLite the write transaction is
  ``BEGIN IMMEDIATE`` already). One writer at a time per store decides "is the path free", "is
  the store under its limit" and the order of versions.
- Transient failures are retried inside ``Database.run``; callers never see "database is
  locked". A failure that persists is ``Unavailable``, and the transaction left nothing behind.

The SQL here is plain and portable between SQLite and PostgreSQL (see ``sql.py`` for why);
``schema.py`` explains every table and column it touches.
"""

from __future__ import annotations

from mnemofs.store.credentials import CredentialsMixin
from mnemofs.store.feed import FeedMixin
from mnemofs.store.folders import FoldersMixin
from mnemofs.store.history import HistoryMixin
from mnemofs.store.journals import JournalMixin
from mnemofs.store.memories import MemoriesMixin
from mnemofs.store.pools import PoolsMixin
from mnemofs.store.recall import RecallMixin, prompt_note
from mnemofs.store.rows import decode_content, sha256_hex, utc_now, validate_content
from mnemofs.store.saves import SavesMixin
from mnemofs.store.sessions import SessionsMixin
from mnemofs.store.stores import StoresMixin
from mnemofs.store.timetravel import TimeTravelMixin
from mnemofs.store.transfer import TransferMixin
from mnemofs.store.versions import VersionsMixin

__all__ = [
    "MemoryService",
    "decode_content",
    "prompt_note",
    "sha256_hex",
    "utc_now",
    "validate_content",
]


class MemoryService(
    StoresMixin,
    MemoriesMixin,
    SavesMixin,
    VersionsMixin,
    FeedMixin,
    JournalMixin,
    RecallMixin,
    SessionsMixin,
    CredentialsMixin,
    TransferMixin,
    FoldersMixin,
    HistoryMixin,
    TimeTravelMixin,
    PoolsMixin,
):
    """Stores, memories, versions and sessions over one database (one workspace).

    ``actor`` is recorded on every version this service writes unless a call names another:
    ``api`` for the Python API, ``cli`` for the CLI, a session id for a mount.

    One class over the resource modules of this package (each a mixin over ``ServiceBase``);
    every public method is one transaction."""

    reads_along = False  # a read is one indexed row (``Backend.reads_along``)
