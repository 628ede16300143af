"""Verifiable erasure (issue 12): after a redaction, a prune or a store delete returns, the
removed text is nowhere in the SQLite file or its WAL (the row store, the search index's
segments, free space); on PostgreSQL, after ``mnemofs db scrub``, nowhere in the table files.
A redacted version's content never reaches search, the context or the version API again."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnemofs.store import Engine, MemoryService, make_engine

from .conftest import _fresh_pg_engine, pg_url

MARKER = "Zq7secretmarkerK9"  # the plain text, and (lowercased) the index's token
TOKEN_PART = b"ecretmarkerk9"  # a token's tail: the index stores terms prefix-compressed


def traces(db: Path) -> list[str]:
    found = []
    for path in (db, Path(f"{db}-wal")):
        if path.exists():
            data = path.read_bytes()
            if MARKER.encode() in data:
                found.append(f"{path.name}: text")
            if TOKEN_PART in data:
                found.append(f"{path.name}: token")
    return found


def filled(service: MemoryService, name: str) -> str:
    store = service.create_store(name).id
    for i in range(200):  # segments and pages enough that nothing is trivially rewritten
        service.create_memory(store, f"/n{i}.md", f"ordinary note {i} about tea and zebras\n")
    return store


def test_sqlite_erasing_operations_leave_no_trace(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    service = MemoryService(make_engine(str(db)), actor="api")
    reader = MemoryService(make_engine(str(db)), actor="api")  # another open connection
    store = filled(service, "S")
    reader.list_memories(store).data  # noqa: B018
    # A secret saved, checkpointed into the file, then replaced and its old version redacted.
    secret = service.create_memory(store, "/keys.md", f"the password is {MARKER} here\n")
    service.checkpoint(force=True)
    assert traces(db)  # the test can see it
    updated = service.update_memory(store, secret.id, content="rotated; nothing here\n")
    service.redact_version(store, secret.memory_version_id)
    assert traces(db) == []
    assert service.search(store, MARKER) == []
    assert service.get_version(store, secret.memory_version_id).content is None
    session = service.create_session([{"memory_store_id": store}], mount_root="/m")
    assert MARKER not in service.context(session.id)

    # Prune: versions past retention go, with their text.
    service.update_memory(store, secret.id, content=f"again {MARKER}\n")
    service.update_memory(store, secret.id, content="and gone\n")
    service.checkpoint(force=True)
    assert traces(db)
    time.sleep(0.002)  # times have milliseconds: what came before is older than now
    assert service.prune_versions(store, older_than_days=0, keep_last=1) > 0
    assert traces(db) == []

    # Store delete: every memory and version of the store.
    other = filled(service, "T")
    service.create_memory(other, "/k.md", f"{MARKER}\n")
    service.checkpoint(force=True)
    assert traces(db)
    service.delete_store(other)
    assert traces(db) == []
    assert service.get_memory(store, updated.id).content == "and gone\n"
    assert service.check().ok
    reader.close()
    service.close()


def pg_relation_files(engine: Engine) -> list[Path]:
    conn = engine.connect()
    try:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
        paths = [
            conn.execute("SELECT pg_relation_filepath(%s)", (name,)).fetchone()[0]
            for name in ("contents", "memories", "memory_versions", "ix_memories_search_vector")
        ]
    finally:
        conn.rollback()
        conn.close()
    return [Path(data_dir) / p for p in paths if p]


@pytest.mark.postgres
def test_postgres_scrub_removes_dead_tuples() -> None:
    url = pg_url()
    engine = _fresh_pg_engine()
    service = MemoryService(engine, actor="api")
    store = filled(service, "S")
    secret = service.create_memory(store, "/keys.md", f"the password is {MARKER} here\n")
    service.update_memory(store, secret.id, content="rotated\n")
    service.redact_version(store, secret.memory_version_id)
    conn = engine.connect()
    conn.autocommit = True
    conn.execute("CHECKPOINT")  # what the server holds in memory reaches the files
    conn.close()

    def in_files() -> bool:
        blobs = [p.read_bytes() for p in pg_relation_files(engine)]
        return any(MARKER.encode() in b or TOKEN_PART in b for b in blobs)

    assert in_files()  # dead tuples: the documented gap, until a scrub
    done = subprocess.run(
        [sys.executable, "-m", "mnemofs", "--db", url, "db", "scrub"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert not in_files()
    assert service.search(store, MARKER) == []
    assert service.get_memory(store, secret.id).content == "rotated\n"
    service.close()


@pytest.mark.mounted
def test_redacted_content_reaches_no_mount_folder_or_search(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A mount and a sync folder that held a secret as a memory's content show the new content
    once it is replaced, and nothing brings the redacted text back."""
    from mnemofs.sync import SyncWorker

    from .mounted import mounted, wait_for

    service = MemoryService(engine, actor="api")
    store = service.create_store("Notes", secrets="allow").id
    secret = service.create_memory(store, "/keys.md", f"the password is {MARKER}\n")
    root, folder = tmp_path / "mnt", tmp_path / "synced"
    mount_session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    sync_session = service.create_session([{"memory_store_id": store}], mount_root=str(folder))
    worker = SyncWorker(service, sync_session, folder)
    worker.reconcile()
    with mounted(db_url, mount_session.id, root):
        note = root / "notes" / "keys.md"
        assert MARKER in note.read_text()  # cached by the mount and the kernel
        service.update_memory(store, secret.id, content="rotated\n")
        service.redact_version(store, secret.memory_version_id)
        assert wait_for(lambda: note.read_text() == "rotated\n", timeout=2.0)
        worker.reconcile()
        files = {p.name: p.read_text() for p in (folder / "notes").iterdir()}
        assert files == {"keys.md": "rotated\n"}  # no conflict copy either
    assert service.search(store, "password") == []
    assert all(
        MARKER not in (service.get_version(store, v.id).content or "")
        for v in service.list_versions(store)
    )
    service.close()
