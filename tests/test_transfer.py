"""Export and import of a store (issue 18): the round trip is exact, bad files import nothing."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mnemofs import archive, limits
from mnemofs.errors import Conflict, InvalidRequest, LimitExceeded
from mnemofs.store import MemoryService, make_engine
from mnemofs.store.texts import _content_of

from .conftest import _fresh_pg_engine


def make_history(service: MemoryService) -> str:
    """A store with every kind of history: edits, a rename, a deletion, a redaction, an
    explicit empty directory, metadata, reads noted, several actors."""
    store = service.create_store(
        "Notes", "what the team knows", metadata={"team": "infra"}, on_full="evict-lru"
    )
    sid = store.id
    a = service.create_memory(sid, "/notes/a.md", "first\n")
    service.update_memory(sid, a.id, content="first\nsecond\n")
    b = service.create_memory(sid, "/notes/b.md", "bee ünïcode ✓\n", actor="user:alice")
    service.update_memory(sid, b.id, path="/archive/b.md")
    gone = service.create_memory(sid, "/tmp/gone.md", "soon gone")
    service.delete_memory(sid, gone.id)
    secret = service.create_memory(sid, "/oops.md", "a password here")
    old = secret.memory_version_id
    service.update_memory(sid, secret.id, content="fixed")
    service.redact_version(sid, old)
    service.make_directory(sid, "/empty/")
    service.get_memory(sid, a.id)  # a read: accessed_at moves
    service.flush_accesses()
    return sid


def state(service: MemoryService, store_id: str, *, ids: bool) -> dict[str, Any]:
    """Everything an export promises to carry, read straight from the rows. Without ``ids``,
    memory ids are replaced by the order they first appear in, so the shape of the history
    (which versions are one memory's) is still compared."""

    def run(tx: Any) -> dict[str, Any]:
        store = tx.one(
            "SELECT name, description, metadata, kind, owner, on_full, secrets, created_at, "
            "updated_at, archived_at, memory_count, id FROM memory_stores WHERE id = :s",
            {"s": store_id},
        )
        versions = tx.all(
            f"SELECT id, memory_id, operation, path, {_content_of('memory_versions')}, "
            "content_sha256, size_bytes, created_at, actor, redacted_at, redacted_by, folded_id "
            "FROM memory_versions WHERE store_id = :s ORDER BY seq",
            {"s": store_id},
        )
        memories = tx.all(
            f"SELECT id, path, {_content_of('memories')}, content_sha256, size_bytes, "
            "created_at, updated_at, accessed_at, head_version_id FROM memories "
            "WHERE store_id = :s ORDER BY path",
            {"s": store_id},
        )
        dirs = tx.all(
            "SELECT path, created_at FROM directories WHERE store_id = :s ORDER BY path",
            {"s": store_id},
        )
        return {"store": store, "versions": versions, "memories": memories, "dirs": dirs}

    raw = service.db.run(run, write=False)
    names: dict[str, str] = {}

    def name(value: str | None) -> str | None:
        if value is None or ids:
            return value
        return names.setdefault(value, f"#{len(names)}")

    store = dict(raw["store"]._asdict())
    if not ids:
        del store["id"]
    return {
        "store": store,
        "versions": [
            {**v._asdict(), "id": name(v.id), "memory_id": name(v.memory_id)}
            for v in raw["versions"]
        ],
        "memories": [
            {**m._asdict(), "id": name(m.id), "head_version_id": name(m.head_version_id)}
            for m in raw["memories"]
        ],
        "dirs": [tuple(d) for d in raw["dirs"]],
    }


def export_file(service: MemoryService, store_id: str, path: Path, **kw: Any) -> dict[str, int]:
    with archive.open_for_writing(str(path)) as out:
        return archive.write_export(service, store_id, out, **kw)


def import_file(service: MemoryService, path: Path, **kw: Any) -> Any:
    return service.import_store(archive.reader(str(path)), **kw)


def empty_like(service: MemoryService, tmp_path: Path) -> MemoryService:
    """An empty database on the same backend (PostgreSQL: the test database, emptied)."""
    if service.db.dialect == "postgresql":
        return MemoryService(_fresh_pg_engine(), actor="api")
    return MemoryService(make_engine(f"sqlite:///{tmp_path / 'target.db'}"), actor="api")


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_round_trip_with_ids_is_exact(service: MemoryService, tmp_path: Path, suffix: str) -> None:
    sid = make_history(service)
    before = state(service, sid, ids=True)
    file = tmp_path / f"notes{suffix}"
    counts = export_file(service, sid, file)
    assert counts == {"directories": 1, "versions": 8, "memories": 3}
    assert file.stat().st_mode & 0o777 == 0o600
    target = empty_like(service, tmp_path)
    try:
        store = import_file(target, file, keep_ids=True)
        assert store.id == sid
        assert state(target, sid, ids=True) == before
        assert target.check().ok
        # The same ids again: refused, and nothing more is there.
        with pytest.raises(Conflict, match="already exists"):
            import_file(target, file, keep_ids=True)
        assert [s.id for s in target.list_stores()] == [sid]
    finally:
        target.close()


def test_round_trip_with_new_ids_keeps_the_history(service: MemoryService, tmp_path: Path) -> None:
    sid = make_history(service)
    file = tmp_path / "notes.jsonl"
    export_file(service, sid, file)
    copy = import_file(service, file, name="Copy")  # beside the original, same database
    assert copy.id != sid
    assert copy.name == "Copy"
    mine, theirs = state(service, sid, ids=False), state(service, copy.id, ids=False)
    assert theirs["store"].pop("name") == "Copy"
    mine["store"].pop("name")
    assert theirs == mine
    assert service.check().ok
    # Every id is new, and its time part (the ULID's first 10 characters) is the old one's.
    old, new = state(service, sid, ids=True), state(service, copy.id, ids=True)
    for a, b in zip(old["versions"], new["versions"], strict=True):
        assert a["id"] != b["id"]
        assert a["id"][:17] == b["id"][:17]
    # The copy is an ordinary store: it can be searched, changed, and exported again.
    assert service.search(copy.id, "second")
    memory = service.find_memory(copy.id, "/notes/a.md")
    service.update_memory(copy.id, memory.id, content="third")
    export_file(service, copy.id, tmp_path / "again.jsonl")


def test_heads_only(service: MemoryService, tmp_path: Path) -> None:
    sid = make_history(service)
    file = tmp_path / "heads.jsonl"
    counts = export_file(service, sid, file, heads_only=True)
    assert counts == {"directories": 1, "versions": 3, "memories": 3}
    copy = import_file(service, file, name="Heads")
    got = state(service, copy.id, ids=False)
    want = state(service, sid, ids=False)
    assert [m["path"] for m in got["memories"]] == [m["path"] for m in want["memories"]]
    assert [m["content"] for m in got["memories"]] == [m["content"] for m in want["memories"]]
    assert {v["operation"] for v in got["versions"]} == {"created"}
    assert service.check().ok


def lines_of(file: Path) -> list[str]:
    return file.read_text().splitlines(keepends=True)


BAD_EDITS = {
    "truncated": (lambda ls: ls[:-1], "truncated"),
    "cut mid-line": (lambda ls: [*ls[:-3], ls[-3][:40]], "line 13 is not JSON"),
    "not json": (lambda ls: [*ls[:3], "{oops\n", *ls[4:]], "line 4 is not JSON"),
    "newer format": (
        lambda ls: [ls[0].replace('"version":1', '"version":2'), *ls[1:]],
        "newer than this mnemofs reads",
    ),
    "not an export": (lambda ls: ['{"hello": 1}\n', *ls[1:]], "line 1 is not a mnemofs export"),
    "changed content": (
        lambda ls: [*ls[:3], ls[3].replace('"first\\n"', '"FIRST\\n"'), *ls[4:]],
        "line 4: version .* content does not match its content_sha256",
    ),
    "bad path": (
        lambda ls: [*ls[:3], ls[3].replace('"/notes/a.md"', '"notes/a.md"'), *ls[4:]],
        "line 4: version .* must be absolute",
    ),
    "unknown record": (
        lambda ls: [*ls[:2], '{"record": "blob"}\n', *ls[2:]],
        "line 3: unknown record 'blob'",
    ),
    "NUL in the description": (
        lambda ls: [ls[0], ls[1].replace("what the team", "what\\u0000the team"), *ls[2:]],
        "line 2: store: description contains a NUL character at 4",
    ),
    "lost line": (lambda ls: [*ls[:3], *ls[4:]], "end record counts 8 versions but"),
    "out of order": (
        lambda ls: [ls[0], ls[1], ls[-2], *ls[2:-2], ls[-1]],
        "line 4: a directory record after the memory records",
    ),
}


@pytest.mark.parametrize("edit", list(BAD_EDITS))
def test_a_bad_file_imports_nothing(service: MemoryService, tmp_path: Path, edit: str) -> None:
    sid = make_history(service)
    file = tmp_path / "notes.jsonl"
    export_file(service, sid, file)
    change, message = BAD_EDITS[edit]
    file.write_text("".join(change(lines_of(file))))
    before = [s.id for s in service.list_stores()]
    with pytest.raises(InvalidRequest, match=message):
        import_file(service, file, name="Bad")
    assert [s.id for s in service.list_stores()] == before
    assert service.check().ok


def test_a_truncated_gzip_file_imports_nothing(service: MemoryService, tmp_path: Path) -> None:
    sid = make_history(service)
    file = tmp_path / "notes.jsonl.gz"
    export_file(service, sid, file)
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 30])
    with pytest.raises(InvalidRequest, match="truncated or corrupt|truncated"):
        import_file(service, file)
    assert [s.id for s in service.list_stores()] == [sid]
    assert gzip.decompress(data)  # the whole file was fine


def test_a_head_that_is_not_its_memorys_imports_nothing(
    service: MemoryService, tmp_path: Path
) -> None:
    sid = make_history(service)
    file = tmp_path / "notes.jsonl"
    export_file(service, sid, file)
    lines = lines_of(file)
    memory = json.loads(lines[-2])
    memory["content_sha256"] = "0" * 64
    lines[-2] = json.dumps(memory) + "\n"
    file.write_text("".join(lines))
    with pytest.raises(InvalidRequest, match=f"line {len(lines) - 1}: memory .* head"):
        import_file(service, file)
    assert [s.id for s in service.list_stores()] == [sid]


def test_a_full_store_round_trips(tmp_path: Path) -> None:
    """A store at the 10,000-memory limit, exported and imported (SQLite: the PostgreSQL
    round trips above share every statement)."""
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'full.db'}"), actor="api")
    try:
        sid = service.create_store("Full").id
        for i in range(limits.MAX_MEMORIES_PER_STORE):
            service.create_memory(sid, f"/d{i % 50}/m{i}.md", f"memory {i}\n")
        file = tmp_path / "full.jsonl.gz"
        export_file(service, sid, file)
        copy = import_file(service, file, name="Copy")
        assert copy.memory_count == limits.MAX_MEMORIES_PER_STORE
        assert (
            state(service, copy.id, ids=False)["memories"]
            == (state(service, sid, ids=False)["memories"])
        )
    finally:
        service.close()


def test_over_the_limit_is_refused(service: MemoryService, tmp_path: Path) -> None:
    sid = service.create_store("Small").id
    service.create_memory(sid, "/a.md", "a")
    file = tmp_path / "small.jsonl"
    export_file(service, sid, file)
    lines = lines_of(file)
    version, memory = json.loads(lines[2]), json.loads(lines[3])
    extra = []
    for i in range(limits.MAX_MEMORIES_PER_STORE):
        suffix = f"{i:016d}".replace("0", "A")
        v = {**version, "id": "memver_01M8RP38KP" + suffix, "memory_id": "mem_01M8RP38KP" + suffix}
        v["path"] = f"/m{i}.md"
        m = {**memory, "id": v["memory_id"], "head_version_id": v["id"], "path": v["path"]}
        extra.append((v, m))
    body = [lines[0], lines[1], lines[2]] + [json.dumps(v) + "\n" for v, _ in extra]
    body += [lines[3]] + [json.dumps(m) + "\n" for _, m in extra]
    body.append(
        json.dumps(
            {
                "record": "end",
                "directories": 0,
                "versions": len(extra) + 1,
                "memories": len(extra) + 1,
            }
        )
        + "\n"
    )
    file.write_text("".join(body))
    with pytest.raises(LimitExceeded, match="10001 live memories"):
        import_file(service, file, name="Big")
    assert [s.id for s in service.list_stores()] == [sid]


def test_over_the_directory_limit_is_refused(service: MemoryService, tmp_path: Path) -> None:
    sid = service.create_store("Dirs").id
    service.make_directory(sid, "/d0")
    file = tmp_path / "dirs.jsonl"
    export_file(service, sid, file)
    head, store, directory, _end = lines_of(file)
    most = limits.MAX_DIRECTORIES_PER_STORE
    made = json.loads(directory)
    body = [head, store]
    body += [json.dumps({**made, "path": f"/d{i:05}/"}) + "\n" for i in range(most + 1)]
    end = {"record": "end", "directories": most + 1, "versions": 0, "memories": 0}
    file.write_text("".join(body) + json.dumps(end) + "\n")
    with pytest.raises(LimitExceeded, match=f"{most + 1} directories, over the limit of {most}"):
        import_file(service, file, name="Many")
    assert [s.id for s in service.list_stores()] == [sid]


def mnemofs(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemofs", "--db", str(db), *args], capture_output=True, text=True
    )


def test_cli_export_and_import(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    assert mnemofs(source, "stores", "create", "Notes").returncode == 0
    created = mnemofs(source, "memories", "create", "Notes", "/a.md", "--content", "hi")
    assert created.returncode == 0
    out = tmp_path / "notes.jsonl.gz"
    done = mnemofs(source, "--json", "stores", "export", "Notes", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["versions"] == 1
    piped = mnemofs(source, "stores", "export", "Notes")
    end = '{"record":"end","directories":0,"versions":1,"memories":1}'
    assert piped.stdout.splitlines()[-1] == end
    assert "exported memstore_" in piped.stderr
    target = tmp_path / "b.db"
    done = mnemofs(target, "--json", "stores", "import", str(out), "--keep-ids")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["memory_count"] == 1
    assert mnemofs(target, "memories", "cat", "Notes", "/a.md").stdout == "hi"
    again = mnemofs(target, "stores", "import", str(out), "--keep-ids")
    assert again.returncode == 4
    assert "already exists" in again.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nonsense\n")
    refused = mnemofs(target, "stores", "import", str(bad))
    assert refused.returncode == 2
    assert "line 1 is not JSON" in refused.stderr


def test_a_journal_round_trips(service: MemoryService, tmp_path: Path) -> None:
    journal = service.create_store("Turns", kind="journal").id
    for turn in range(3):
        service.append_journal(journal, json.dumps({"turn": turn}) + "\n")
    file = tmp_path / "turns.jsonl"
    export_file(service, journal, file)
    copy = import_file(service, file, name="Turns (copy)")
    assert copy.kind == "journal"
    got, want = state(service, copy.id, ids=False), state(service, journal, ids=False)
    got["store"].pop("name")
    want["store"].pop("name")
    assert got == want
    service.append_journal(copy.id, '{"turn": 3}\n')  # the copy goes on as a journal
    assert service.check().ok


def test_keep_ids_with_a_memory_over_several_pages(
    service: MemoryService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Versions are written a page at a time: a memory whose versions span pages is one
    memory of this import, not an id taken by someone else."""
    from mnemofs.store import transfer

    monkeypatch.setattr(transfer, "PAGE", 3)
    sid = service.create_store("Long").id
    memory = service.create_memory(sid, "/a.md", "v0\n")
    for i in range(1, 8):
        service.update_memory(sid, memory.id, content=f"v{i}\n")
    before = state(service, sid, ids=True)
    file = tmp_path / "long.jsonl"
    export_file(service, sid, file)
    target = empty_like(service, tmp_path)
    try:
        assert import_file(target, file, keep_ids=True).id == sid
        assert state(target, sid, ids=True) == before
    finally:
        target.close()


def test_an_export_is_one_snapshot(service: MemoryService) -> None:
    """A save committed while an export runs is not in it, not even in part: every record
    comes from the moment the export began (PostgreSQL: its reads run in one REPEATABLE READ
    transaction; other reads see each statement's own moment)."""
    import threading

    from mnemofs.content import Content

    store = service.create_store("Snap", "").id
    service.create_memory(store, "/before.md", "before")
    saved = threading.Event()

    def save_meanwhile() -> None:  # another thread: another connection, committed at once
        service.save_file(store, "/during.md", Content.from_text("during"))
        saved.set()

    records: list[Any] = []

    def emit(record: Any) -> None:
        if not records:
            writer = threading.Thread(target=save_meanwhile)
            writer.start()
            writer.join()
        records.append(record)

    counts = service.export_store(store, emit)
    assert saved.is_set()
    paths = {getattr(r, "path", None) for r in records}
    assert "/before.md" in paths
    assert "/during.md" not in paths
    assert counts["memories"] == 1
    assert len(service.list_memories(store, depth=None).data) == 2
