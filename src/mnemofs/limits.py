"""Every limit of SPEC.md as one named constant. Nothing else in the code spells these numbers."""

from __future__ import annotations

MAX_CONTENT_BYTES = 102_400
"""A memory's content, as UTF-8 bytes (100 KiB)."""

MAX_MEMORIES_PER_STORE = 10_000
MAX_STORES_PER_SESSION = 8
MAX_INSTRUCTIONS_CHARS = 4_096
MAX_STORE_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 1_024
"""New descriptions; longer ones already stored are kept."""
MAX_SEGMENT_BYTES = 255
MAX_PATH_BYTES = 1_024
MAX_PATH_SEGMENTS = 20

MAX_DIRECTORIES_PER_STORE = 10_000
"""Directories a store keeps as rows of their own: made by mkdir, or kept when the memories
under them went. Directories implied by memories' paths do not count."""

MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512

DEFAULT_RETENTION_DAYS = 30
"""Prune removes versions older than this..."""
DEFAULT_KEEP_VERSIONS = 10
"""...except the newest this many versions of each live memory."""

DEFAULT_PAGE_LIMIT = 20
MAX_PAGE_LIMIT = 100
MAX_FULL_PAGE_LIMIT = 20
"""A page of memories or versions with their content (``view=full``)."""

MAX_REQUEST_OVERHEAD_BYTES = 64 * 1024
"""An HTTP request body may hold a content's worth of JSON-escaped text plus this much."""

MAX_REQUEST_HEADER_BYTES = 64 * 1024
"""An HTTP request's line and header fields together (431 over it)."""
REQUEST_READ_TIMEOUT_S = 10.0
"""An HTTP request's header must arrive whole this long after its first byte (or after the
connection opens), and its body may pause no longer than this between reads (408)."""
MIN_BODY_RATE = 1024
"""...and past its first REQUEST_READ_TIMEOUT_S, come at this many bytes a second (408)."""

LONG_POLLS_PER_CALLER = 64
"""Long polls (``changes/wait``) one caller (a session, or an API key) may hold open on one
``mnemofs serve`` process at a time (429 past it): a mount or sync worker holds one, and
one session's token is all a sandbox holds."""

SERVE_CONNECTIONS = 8
"""PostgreSQL: store calls a ``mnemofs serve`` process makes at a time, so the database
connections it holds for requests (each worker thread keeps one); ``--connections``."""

DEFAULT_MOUNT_ROOT = "/mnt/memory"

# Recall: how many words of memory `mnemofs context` gives a turn by default.
DEFAULT_CONTEXT_WORDS = 4_000
DEFAULT_SEARCH_LIMIT = 10  # hits a search returns unless asked for more
MAX_SEARCH_WORDS = 16
"""Different words in one search query: a hit holds every one, and each costs the index work
for every memory that holds the others (a query repeating common words took seconds)."""

# Turn journals: `userMessage`, `result` and `title` are cut to this many code points.
DEFAULT_JOURNAL_TEXT_CHARS = 2_000

MAX_USER_ID_CHARS = 255  # an end user's id (a store's owner, a session's user)
