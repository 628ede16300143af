"""Turn journals: one JSON line per agent turn appended to ``/journal.jsonl``, rotated
whole when full.
"""

from __future__ import annotations

from mnemofs import limits
from mnemofs.content import Content
from mnemofs.errors import (
    Conflict,
    InvalidRequest,
)
from mnemofs.models import (
    Memory,
)
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import _MEMORY_COLS, JOURNAL_PATH, _screen, utc_now
from mnemofs.store.texts import _MEMORY_CONTENT
from mnemofs.store.tx import Tx


class JournalMixin(ServiceBase):
    """Turn journals: one JSON line per agent turn appended to ``/journal.jsonl``, rotated"""

    def append_journal(self, store_id: str, line: str, *, actor: str | None = None) -> Memory:
        """Append one record line to a journal store's ``/journal.jsonl``.

        One transaction holding the store's lock: concurrent appends queue, none interleaves
        with another or is lost. When the line would take the file past the size limit, the
        file first moves to ``/journal-<time>.jsonl`` (a 'renamed' version, content untouched)
        and a new ``/journal.jsonl`` starts with the line, so no record is ever split.
        """
        if not isinstance(line, str) or not line.endswith("\n") or "\n" in line[:-1]:
            raise InvalidRequest("a journal record is exactly one line, ending in a newline")
        record = Content.from_text(line)

        def run(tx: Tx) -> Memory:
            # Locks the store first: appends queue (and its pool, as an append may create).
            policy = self._change_store(tx, store_id, may_create=True)
            _screen(policy, store_id, JOURNAL_PATH, record.text)
            store = self._store_row(tx, store_id)
            if store.kind != "journal":
                raise InvalidRequest(
                    f"memory store {store.name!r} ({store_id}) is not a journal "
                    "(create one with kind 'journal')"
                )
            row = tx.one(
                f"SELECT {_MEMORY_COLS}, {_MEMORY_CONTENT} FROM memories "
                "WHERE store_id = :store AND path = :path",
                {"store": store_id, "path": JOURNAL_PATH},
            )
            if row is not None and row.size_bytes + record.size <= limits.MAX_CONTENT_BYTES:
                grown = Content.from_text(row.content + record.text)
                return self._apply_update(tx, store_id, row, row.path, grown, actor)
            self._change_store(tx, store_id, +1, room_for=JOURNAL_PATH)
            if row is not None:  # rotate: the full file becomes a segment beside the new one
                segment = self._journal_segment_path(tx, store_id)
                self._apply_update(tx, store_id, row, segment, None, actor)
            self._path_check(tx, store_id, JOURNAL_PATH)()
            return self._insert_memory(tx, store_id, JOURNAL_PATH, record, actor)

        return self._write(run)

    @staticmethod
    def _journal_segment_path(tx: Tx, store_id: str) -> str:
        stamp = utc_now().replace("-", "").replace(":", "").replace(".", "")
        for n in range(1000):
            path = f"/journal-{stamp}{'' if n == 0 else f'-{n}'}.jsonl"
            taken = tx.scalar(
                "SELECT 1 FROM memories WHERE store_id = :store AND path = :path",
                {"store": store_id, "path": path},
            )
            if taken is None:
                return path
        raise Conflict(f"no free journal segment name for {stamp}")
