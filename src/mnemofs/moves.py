"""What a remote mount's own changes left its stores at, so that it need not read them back.

A server reports, in the reply to each of a mount's changes, the revision and the end of the
change feed that change left its store at (``errors.MOVED_HEADER``; ``ServiceBase.take_moved``
asks for them in the change's own transaction, so no other writer can have moved the store in
between). When the mount next looks and finds a store moved from the revision its tree shows
to a newer one, and every revision in between is one its own changes reported, nobody else
changed the store meanwhile: the tree already shows all of it, and the mount takes the newer
revision and feed end as seen instead of reading its own changes back through the server
(``RefreshMixin.refresh``). Any gap (a change elsewhere, a change of its own whose reply never
came, an eviction, a write that moved two stores) and it reads the feed as before.
"""

from __future__ import annotations

import threading

# Revisions remembered per store, at most: a look takes them every 50 ms while the mount
# writes; a sync worker, which never looks this way, keeps no more than this (~1 MB).
KEPT = 10_000


class OwnMoves:
    """Revisions reported by this mount's own changes, per store (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._moves: dict[str, dict[int, int]] = {}  # store -> revision -> feed end

    def note(self, header: str) -> None:
        """Take a reply's ``mnemofs-moved`` header: "<store> <revision> <feed end>"."""
        try:
            store_id, revision, last_seq = header.split(" ")
            moved = int(revision), int(last_seq)
        except ValueError:
            return  # not one we can read: the look reads the feed
        with self._lock:
            kept = self._moves.setdefault(store_id, {})
            kept[moved[0]] = moved[1]
            if len(kept) > KEPT:
                del kept[next(iter(kept))]  # the oldest reported: revisions only grow

    def since(self, store_id: str, seen: int, now: int) -> int | None:
        """The feed end at revision ``now`` if every revision after ``seen`` up to ``now`` was
        this mount's own, else None; either way what is at or below ``now`` is forgotten."""
        with self._lock:
            kept = self._moves.get(store_id)
            if not kept:
                return None
            own = now > seen and all(r in kept for r in range(seen + 1, now + 1))
            last = kept.get(now) if own else None
            for revision in [r for r in kept if r <= now]:
                del kept[revision]
            return last
