"""The database schema: one place where every table, column and invariant is explained.

Conventions
- Ids are text: the resource prefix and a ULID (``memstore_01J...``).
- Timestamps are text, UTC ISO-8601 with milliseconds and a ``Z`` (``2026-11-30T15:53:37.123Z``).
  That format sorts as time does, so range conditions on it (prune) are plain string compares,
  identical on SQLite and PostgreSQL.
- Paths use byte-order collation on both backends (SQLite's default BINARY, ``"C"`` on
  PostgreSQL), so ``ORDER BY path`` is the listing order and ``path >= '/a/' AND path < '/a0'``
  is an index range scan of everything under ``/a/``.
- Every change to a store's memories or directories happens in one transaction that first locks
  that store's row (``SELECT ... FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), so
  the per-store checks (path free, count under the limit) cannot race.

Search (migrations 0004, 0009, 0013-0016) lives outside this file: on SQLite an FTS5
table ``memories_fts`` over the view ``memories_text`` (each memory's path and content), whose
changes triggers note in ``search_pending``; on PostgreSQL a ``search_vector`` column with a
GIN index, made from the version ``search_head`` names, and ``search_marks``, how far each
store's versions are taken in (``SEARCH_OBJECTS``). Both catch up in batches
(``ServiceBase.catch_up_search``). A migration that rebuilds ``memories`` (SQLite batch mode)
must recreate those triggers.

Changing anything here needs a new Alembic revision in ``migrations/versions`` and a bump of
``SCHEMA_REVISION`` (in ``revision.py``); ``tests/test_migrations.py`` fails when this file and
the migrations disagree.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from mnemofs.store.revision import SCHEMA_REVISION  # noqa: F401  (re-exported)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# Byte-order text for paths (see the module docstring).
PathText = Text().with_variant(Text(collation="C"), "postgresql")
# An auto-incrementing integer key: SQLite only aliases the rowid for exactly "INTEGER".
SeqInteger = BigInteger().with_variant(Integer(), "sqlite")


memory_stores = Table(
    "memory_stores",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),  # 1-255 chars; not unique (slugs disambiguate)
    Column("description", Text, nullable=False, default=""),  # shown to the agent
    Column("created_at", Text, nullable=False),
    Column("updated_at", Text, nullable=False),  # last change of name or description
    Column("archived_at", Text),  # NULL while live; set once, never cleared
    # Live memories in the store, kept in step by every create/delete so the limit check and
    # statfs never count rows.
    Column("memory_count", Integer, nullable=False, default=0),
    # Its rows in `directories`, kept in step by triggers (0017) so mkdir's limit check never
    # counts rows.
    Column("directory_count", Integer, nullable=False, server_default="0"),
    # Bumped by every change to the store's memories, directories or metadata: a cheap
    # "did anything change since I last looked" for mounts and sync workers.
    Column("revision", BigInteger, nullable=False, default=0),
    # 'memory' (path-addressed documents) or 'journal' (journal.jsonl, one JSON line per agent
    # turn, appended by `mnemofs journal append`; sessions attach it read_only).
    Column("kind", Text, nullable=False, server_default="memory"),
    # The end user the store belongs to; '' for a general store. A session acting for a user
    # sees general stores and that user's only (sessions.user_id).
    Column("owner", Text, nullable=False, server_default=""),
    # What a create does when the store is full: 'refuse' (StoreFull, ENOSPC) or 'evict-lru'
    # (delete the least recently accessed memory first, with a 'deleted' version by 'evict').
    Column("on_full", Text, nullable=False, server_default="refuse"),
    # 'refuse': a save whose content holds a credential (mnemofs/secrets.py) is refused;
    # 'allow': stored as any text. New stores refuse; stores from before 0007 allow.
    Column("secrets", Text, nullable=False, server_default="refuse"),
    # A JSON object of string pairs (<= MAX_METADATA_PAIRS) for the caller's own bookkeeping;
    # an update merges into it and a null value deletes a key.
    Column("metadata", Text, nullable=False, server_default="{}"),
    # History before this time is incomplete: a prune removed versions older than it (0011).
    # Restoring or forking the store to an earlier time is refused. NULL: never pruned.
    Column("pruned_before", Text),
    # The store's own limits, below the global ones (0012): NULL means the global limit.
    Column("max_memories", Integer),
    Column("max_content_bytes", Integer),
    # The capacity pool the store shares its capacity with (0012); NULL: none.
    Column("pool_id", Text, ForeignKey("capacity_pools.id"), index=True),
)

capacity_pools = Table(
    "capacity_pools",
    metadata,
    # Stores that share one capacity (seed 001: an agent's general store and every end user's):
    # at most ``max_memories`` live memories over all of them. A create in a full pool is
    # refused, or with 'evict-lru' first deletes the least recently accessed memory of the
    # whole pool (a 'deleted' version by 'evict'), in the same transaction.
    Column("id", Text, primary_key=True),  # pool_<ULID>
    Column("name", Text, nullable=False),
    Column("max_memories", Integer, nullable=False),
    Column("on_full", Text, nullable=False, server_default="refuse"),
    Column("created_at", Text, nullable=False),
)

memories = Table(
    "memories",
    metadata,
    Column("id", Text, primary_key=True),
    Column("store_id", Text, ForeignKey("memory_stores.id"), nullable=False),
    Column("path", PathText, nullable=False),
    # The content: the ``contents`` row of this store with this hash (0014).
    Column("content_sha256", Text, nullable=False),  # hex SHA-256 of the UTF-8 bytes
    Column("size_bytes", Integer, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("updated_at", Text, nullable=False),
    # The version written by the last change: the head, which redact refuses to clear.
    Column("head_version_id", Text, nullable=False),
    # The last read or write (reads are buffered by each process and written in batches, so
    # this may lag by about a second); the order 'evict-lru' evicts in. NULL: never since 0005.
    Column("accessed_at", Text),
    # One memory per path; the index also serves ordered listings and prefix range scans.
    UniqueConstraint("store_id", "path"),
)

memory_versions = Table(
    "memory_versions",
    metadata,
    # Commit order. Within one store, writers hold the store's row lock, so a higher seq is
    # always a later commit; "newest first" is ORDER BY seq DESC.
    Column("seq", SeqInteger, primary_key=True, autoincrement=True),
    Column("id", Text, nullable=False, unique=True),
    Column("store_id", Text, ForeignKey("memory_stores.id"), nullable=False),
    # No foreign key: versions outlive the memory they describe.
    Column("memory_id", Text, nullable=False),
    # created | modified | renamed | deleted. 'renamed' (a path change, content untouched) is
    # recorded as such and spoken as 'modified' with the new path, the wire's word for it.
    Column("operation", Text, nullable=False),
    Column("path", PathText, nullable=False),  # the memory's path after the change
    # The memory's content after the change, as a ``contents`` row of the store (0014). NULL
    # once redacted, and for 'deleted' versions.
    Column("content_sha256", Text),
    Column("size_bytes", Integer, nullable=False),  # kept through redaction
    Column("created_at", Text, nullable=False),
    # Who wrote it (models.Actor): a session id, an API key id, 'user:<id>', or a word naming a
    # service account of mnemofs's own ('cli', 'api', 'evict').
    Column("actor", Text, nullable=False),
    Column("redacted_at", Text),
    Column("redacted_by", Text),  # the actor that redacted it, stored as ``actor`` is
    # A fold (a mount's fresh temporary file renamed over this memory) drops the temporary
    # memory's whole history: this version, which took its content, names it, and the change
    # feed reports it deleted here, so mounts and sync workers that saw it let go of it.
    Column("folded_id", Text),
    Index(None, "store_id", "seq"),
    Index(None, "memory_id", "seq"),
    # A deleted memory by its last path (the mount's .history): deletions only, so saves
    # never write to it (0010).
    Index(
        "ix_memory_versions_deleted_path",
        "store_id",
        "path",
        sqlite_where=text("operation = 'deleted'"),
        postgresql_where=text("operation = 'deleted'"),
    ),
    # SQLite: AUTOINCREMENT, so a seq is never handed out again after its row is deleted (a
    # fold deletes the newest versions; a feed reader that saw them would skip the next ones).
    sqlite_autoincrement=True,
)

contents = Table(
    "contents",
    metadata,
    # Each distinct text of a store, once (0014): memories and versions name theirs by hash, so
    # a rename, a restore or a revert writes no content, and a save writes it once. Per store:
    # deleting or pruning a store touches only its own rows, and no store can learn from timing
    # or errors whether another holds some text. A row goes when nothing names it any more: at
    # a redaction, a prune or the store's deletion (never on the save path; a fold can leave
    # one behind, which the next prune sweeps and ``db check`` reports).
    Column("store_id", Text, ForeignKey("memory_stores.id"), primary_key=True),
    Column("sha256", Text, primary_key=True),  # hex SHA-256 of the UTF-8 bytes
    Column("content", Text, nullable=False),  # valid UTF-8, no NUL, <= MAX_CONTENT_BYTES
    # A rowid table on SQLite, its key an index beside it: WITHOUT ROWID keeps a row in the
    # key's b-tree, where a text of 4 KiB fills a leaf of its own at a random place (the key
    # is a hash), so every save split and rewrote leaves: 14-16 pages a save against 12-15.
)

directories = Table(
    "directories",
    metadata,
    # Directories made explicitly (mkdir); they persist while empty, until removed. Directories
    # implied by the memories under them have no row.
    Column("store_id", Text, ForeignKey("memory_stores.id"), primary_key=True),
    Column("path", PathText, primary_key=True),  # a prefix: '/notes/'
    Column("created_at", Text, nullable=False),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("created_at", Text, nullable=False),
    Column("ended_at", Text),
    Column("mount_root", Text, nullable=False),  # '/mnt/memory' unless asked otherwise
    Column("user_id", Text, nullable=False, server_default=""),  # the end user, '' for none
    # A JSON object: what the creator sent beside the resources (agent, environment_id,
    # metadata, title...), returned as sent.
    Column("fields", Text, nullable=False, server_default="{}"),
)

session_attachments = Table(
    "session_attachments",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id"), primary_key=True),
    Column("position", Integer, primary_key=True),  # order given at creation, 0-based
    Column("store_id", Text, ForeignKey("memory_stores.id"), nullable=False),
    Column("access", Text, nullable=False),  # read_write | read_only
    Column("instructions", Text, nullable=False, default=""),
    # Fixed at creation so a later store rename never moves a session's mount.
    Column("slug", Text, nullable=False),
    # The store's name and description as of attach time (what the session was told; the
    # prompt note and the session object show these, not a later rename).
    Column("name", Text, nullable=False, server_default=""),
    Column("description", Text, nullable=False, server_default=""),
    Index(None, "store_id"),
)


api_keys = Table(
    "api_keys",
    metadata,
    # An admin credential. The secret is shown once at creation; only its SHA-256 is kept (a
    # random 256-bit secret needs no slow hash). The key's text names its id, so checking one
    # is a primary-key read and one constant-time compare.
    Column("id", Text, primary_key=True),  # apikey_<ULID>
    Column("name", Text, nullable=False),
    Column("secret_hash", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("revoked_at", Text),  # set once; a revoked key is refused from the next request on
)

session_tokens = Table(
    "session_tokens",
    metadata,
    # A credential that reaches one session and the stores attached to it, as their access
    # allows. Hashed like api_keys; dead once its session has ended.
    Column("id", Text, primary_key=True),  # sesstok_<ULID>
    Column("session_id", Text, ForeignKey("sessions.id"), nullable=False, index=True),
    Column("secret_hash", Text, nullable=False),
    Column("created_at", Text, nullable=False),
)


# Made by migrations 0004, 0009, 0013 and 0014 with raw SQL; the schema comparison leaves them out.
SEARCH_OBJECTS = frozenset(
    {
        "memories_fts",
        "memories_fts_data",
        "memories_fts_idx",
        "memories_fts_content",
        "memories_fts_docsize",
        "memories_fts_config",
        "search_pending",  # SQLite: changes the index has yet to take (0009)
        "memories_text",  # SQLite: the view the index reads its text from (0014)
        "search_vector",
        "ix_memories_search_vector",
        "search_head",  # PostgreSQL: the version a row's vector was made from (0015)
        "search_marks",  # PostgreSQL: how far each store's versions are in the index (0015)
    }
)
