"""Content kept once per store and hash (migration 0014): what writes a text, what shares it,
and what removes it when nothing names it any more."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest

from mnemofs.store import MemoryService

from .conftest import _fresh_pg_engine, pg_url


def texts(service: MemoryService, store: str) -> list[str]:
    """The texts the store keeps, in order."""

    def run(tx: Any) -> list[str]:
        rows = tx.all("SELECT content FROM contents WHERE store_id = :s", {"s": store})
        return sorted(r.content for r in rows)

    return service.db.run(run, write=False)


def test_a_text_is_kept_once_and_renames_and_restores_add_none(service: MemoryService) -> None:
    store = service.create_store("Once").id
    a = service.create_memory(store, "/a.md", "shared words\n")
    service.create_memory(store, "/b.md", "shared words\n")  # another memory, the same text
    assert texts(service, store) == ["shared words\n"]
    service.update_memory(store, a.id, path="/c.md")  # a rename
    service.update_memory(store, a.id, content="new words\n")
    service.update_memory(store, a.id, content="shared words\n")  # back to a known text
    assert texts(service, store) == ["new words\n", "shared words\n"]
    before = service.get_memory(store, a.id).updated_at
    time.sleep(0.01)  # timestamps are in milliseconds
    service.delete_memory(store, a.id)
    service.restore_store(store, at=before)  # the memory again, from its version's text
    assert service.get_memory(store, a.id).content == "shared words\n"
    assert texts(service, store) == ["new words\n", "shared words\n"]
    other = service.create_store("Other").id  # a store keeps its own texts
    service.create_memory(other, "/a.md", "shared words\n")
    assert texts(service, other) == ["shared words\n"]
    assert service.check().problems == []


def test_a_text_goes_when_nothing_names_it(service: MemoryService) -> None:
    store = service.create_store("Gone").id
    memory = service.create_memory(store, "/a.md", "first\n")
    first = memory.memory_version_id
    twin = service.create_memory(store, "/twin.md", "twin\n")
    service.update_memory(store, memory.id, content="twin\n")  # a version shares twin's text
    shared = service.get_memory(store, memory.id).memory_version_id
    service.update_memory(store, memory.id, content="last\n")
    service.redact_version(store, first)  # named by nothing else: gone
    assert texts(service, store) == ["last\n", "twin\n"]
    service.redact_version(store, shared)  # twin's memory still names it
    assert texts(service, store) == ["last\n", "twin\n"]
    assert service.get_memory(store, twin.id).content == "twin\n"
    service.delete_memory(store, twin.id)  # a version still names it
    assert texts(service, store) == ["last\n", "twin\n"]
    time.sleep(0.002)  # times have milliseconds: what came before is older than now
    assert service.prune_versions(store, older_than_days=0, keep_last=1) > 0
    assert texts(service, store) == ["last\n"]  # only pruned versions named twin's
    assert service.check().problems == []
    service.delete_store(store)
    assert texts(service, store) == []


def test_what_a_fold_leaves_goes_at_a_scrub(service: MemoryService) -> None:
    """A fold drops a temporary file's history, whose first text may be named by nothing
    then; the texts are swept by the next scrub (or prune), and the rest stays."""
    store = service.create_store("Fold").id
    target = service.create_memory(store, "/a.md", "the old text\n")
    temp = service.create_memory(store, "/.a.md.tmp", "half written\n")
    service.update_memory(store, temp.id, content="the new text\n")
    service.rename_over(store, temp.id, target.id, fold=True)
    assert "half written\n" in texts(service, store)
    assert service.check().problems == []
    service.scrub()
    assert texts(service, store) == ["the new text\n", "the old text\n"]
    assert service.get_memory(store, target.id).content == "the new text\n"
    assert service.check().problems == []


@pytest.mark.postgres
def test_a_scrub_waits_for_a_save_that_names_a_text_left_behind() -> None:
    """PostgreSQL: a save that names a text nothing else names (its ``INSERT ... ON CONFLICT``
    found the row and took no lock) commits after a scrub began; the scrub waits for the
    store, as a change does, and the text stays."""
    import psycopg

    from mnemofs.store.engine import _libpq_uri

    service = MemoryService(_fresh_pg_engine(), actor="api")
    store = service.create_store("Race").id
    target = service.create_memory(store, "/a.md", "old\n")
    temp = service.create_memory(store, "/.a.md.tmp", "left behind\n")
    service.update_memory(store, temp.id, content="new\n")
    service.rename_over(store, temp.id, target.id, fold=True)  # named by nothing now
    left = hashlib.sha256(b"left behind\n").hexdigest()
    saving = psycopg.connect(_libpq_uri(pg_url()))
    try:  # a save of that text, in flight: the store locked, the memory not yet written
        saving.execute("SELECT id FROM memory_stores WHERE id = %s FOR UPDATE", [store])
        scrub = threading.Thread(target=service.scrub)
        scrub.start()
        time.sleep(0.5)
        saving.execute(
            "UPDATE memories SET content_sha256 = %s, size_bytes = 12 WHERE id = %s",
            [left, target.id],
        )
        saving.commit()
        scrub.join(60)
    finally:
        saving.close()
    assert service.get_memory(store, target.id).content == "left behind\n"
    service.close()
