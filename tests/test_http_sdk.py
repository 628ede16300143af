"""The HTTP API through the official SDK (strict response validation), on both backends: the
seed's Python examples unchanged, then every endpoint and parameter of API.md."""

from __future__ import annotations

import contextlib
import hashlib
import io
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import anthropic
import pytest

from .http_api import Api, api, seed_blocks

__all__ = ["api"]  # the fixture, used by name


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_seed_python_examples_run_unchanged(api: Api) -> None:
    """Every Python example of the seed, as written, in an order where each finds the names
    it uses (the seed reads ``mem`` before the example that makes it)."""
    blocks = seed_blocks("python")
    assert len(blocks) == 14
    order = [0, 1, 2, 5, 3, 4, 6, 7, 9, 10, 11, 13, 8, 12]
    env: dict[str, Any] = {
        "client": api.client(),
        "agent": SimpleNamespace(id="agent_seed"),
        "environment": SimpleNamespace(id="env_seed"),
    }
    printed: list[str] = []
    for index in order:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(blocks[index], env)
        printed.append(out.getvalue())
    store, session, mem = env["store"], env["session"], env["mem"]
    assert printed[0].strip() == store.id
    assert store.id.startswith("memstore_")
    assert session.resources[0].mount_path == "/mnt/memory/user-preferences"
    assert session.resources[0].access == "read_write"
    assert session.agent.id == "agent_seed"
    assert session.environment_id == "env_seed"
    assert printed[4].split("\n")[:2] == [
        "memory /formatting_standards.md",
        "memory /preferences/formatting.md",
    ]
    assert printed[5].strip() == "Always use tabs, not spaces."
    ops = [line.rsplit(": ", 1)[1] for line in printed[8].strip().splitlines()]
    assert ops == ["modified", "modified", "created"]
    # The redacted version (data[1], the rename) kept who and when, lost content and path.
    redacted = api.service.get_version(store.id, env["version_id"])
    assert (redacted.redacted_at is not None, redacted.content, redacted.path) == (True, None, None)
    assert redacted.redacted_by is not None
    assert redacted.redacted_by.id == api.key_id
    # The store was archived, then the memory deleted (archived stores allow it): gone, and
    # its versions stay.
    archived = [line for line in printed[13].splitlines() if line.startswith(store.id)]
    assert len(archived) == 1
    assert archived[0].startswith(f"{store.id} User Preferences 20")
    with pytest.raises(anthropic.NotFoundError):
        env["client"].beta.memory_stores.memories.retrieve(mem.id, memory_store_id=store.id)
    listed = env["client"].beta.memory_stores.memory_versions.list(store.id, memory_id=mem.id)
    assert [v.operation for v in listed.data] == ["deleted", "modified", "modified", "created"]
    assert all(s.id != store.id for s in env["client"].beta.memory_stores.list())


def test_store_endpoints(api: Api) -> None:
    client = api.client()
    before = datetime.now(UTC) - timedelta(seconds=1)
    store = client.beta.memory_stores.create(
        name="Meta", description="d", metadata={"team": "a", "tier": "1"}
    )
    assert (store.metadata, store.description, store.archived_at) == (
        {"team": "a", "tier": "1"},
        "d",
        None,
    )
    got = client.beta.memory_stores.retrieve(store.id)
    assert got == store
    updated = client.beta.memory_stores.update(
        store.id, description="", metadata={"tier": None, "env": "prod"}
    )
    assert updated.description == ""
    assert updated.metadata == {"team": "a", "env": "prod"}
    assert updated.name == "Meta"
    assert updated.updated_at >= store.updated_at
    # Memory changes do not move the store's updated_at.
    client.beta.memory_stores.memories.create(store.id, path="/x.md", content="x")
    assert client.beta.memory_stores.retrieve(store.id).updated_at == updated.updated_at
    # created_at bounds.
    after = datetime.now(UTC) + timedelta(seconds=1)
    ids = {
        s.id for s in client.beta.memory_stores.list(created_at_gte=before, created_at_lte=after)
    }
    assert store.id in ids
    assert store.id not in {s.id for s in client.beta.memory_stores.list(created_at_gte=after)}
    # Archive: one-way, again unchanged; hidden unless asked.
    archived = client.beta.memory_stores.archive(store.id)
    assert archived.archived_at is not None
    assert client.beta.memory_stores.archive(store.id).archived_at == archived.archived_at
    assert store.id not in {s.id for s in client.beta.memory_stores.list()}
    assert store.id in {s.id for s in client.beta.memory_stores.list(include_archived=True)}
    deleted = client.beta.memory_stores.delete(store.id)
    assert (deleted.id, deleted.type) == (store.id, "memory_store_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.memory_stores.retrieve(store.id)


def test_metadata_limits(api: Api) -> None:
    client = api.client()
    with pytest.raises(anthropic.BadRequestError, match="over 16"):
        client.beta.memory_stores.create(name="M", metadata={f"k{i}": "v" for i in range(17)})
    store = client.beta.memory_stores.create(name="M", metadata={f"k{i}": "v" for i in range(16)})
    with pytest.raises(anthropic.BadRequestError, match="over 16"):
        client.beta.memory_stores.update(store.id, metadata={"one-more": "v"})
    with pytest.raises(anthropic.BadRequestError, match="512"):
        client.beta.memory_stores.update(store.id, metadata={"k0": "v" * 513})
    assert client.beta.memory_stores.retrieve(store.id).metadata == store.metadata


def test_archived_store_rules(api: Api) -> None:
    client = api.client()
    store = client.beta.memory_stores.create(name="Old")
    mem = client.beta.memory_stores.memories.create(store.id, path="/a.md", content="one")
    client.beta.memory_stores.memories.update(mem.id, memory_store_id=store.id, content="two")
    client.beta.memory_stores.archive(store.id)
    for refused in (
        lambda: client.beta.memory_stores.memories.create(store.id, path="/b.md", content="x"),
        lambda: client.beta.memory_stores.memories.update(
            mem.id, memory_store_id=store.id, content="three"
        ),
        lambda: client.beta.memory_stores.update(store.id, name="New"),
    ):
        with pytest.raises(anthropic.BadRequestError, match="archived"):
            refused()
    assert client.beta.memory_stores.memories.retrieve(
        mem.id, memory_store_id=store.id
    ).content == ("two")
    first = client.beta.memory_stores.memory_versions.list(store.id).data[-1]
    redacted = client.beta.memory_stores.memory_versions.redact(first.id, memory_store_id=store.id)
    assert redacted.redacted_at is not None
    client.beta.memory_stores.memories.delete(mem.id, memory_store_id=store.id)
    assert client.beta.memory_stores.delete(store.id).type == "memory_store_deleted"


def test_memory_views_and_fields(api: Api) -> None:
    client = api.client()
    store = client.beta.memory_stores.create(name="Views")
    text = "naïve café ✓\n"
    made = client.beta.memory_stores.memories.create(store.id, path="/v.md", content=text)
    assert made.content is None  # create answers in the basic view by default
    assert (made.content_sha256, made.content_size_bytes) == (sha(text), len(text.encode()))
    full = client.beta.memory_stores.memories.create(
        store.id, path="/w.md", content=None, view="full"
    )
    assert (full.content, full.content_size_bytes, full.content_sha256) == ("", 0, sha(""))
    got = client.beta.memory_stores.memories.retrieve(made.id, memory_store_id=store.id)
    assert got.content == text
    assert got.memory_version_id == made.memory_version_id
    basic = client.beta.memory_stores.memories.retrieve(
        made.id, memory_store_id=store.id, view="basic"
    )
    assert basic.content is None
    assert basic.content_sha256 == sha(text)
    updated = client.beta.memory_stores.memories.update(
        made.id, memory_store_id=store.id, content="new", view="full"
    )
    assert updated.content == "new"
    assert updated.memory_version_id != made.memory_version_id
    listed = client.beta.memory_stores.memories.list(store.id, view="full")
    assert {m.path: m.content for m in listed.data} == {"/v.md": "new", "/w.md": ""}
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        client.beta.memory_stores.memories.list(store.id, view="full", limit=21)
    assert client.beta.memory_stores.memories.list(store.id, limit=100).data


def test_pagination_prefixes_and_depth(api: Api) -> None:
    client = api.client()
    store = client.beta.memory_stores.create(name="Pages")
    paths = [f"/notes/{i:02d}.md" for i in range(45)]
    paths += ["/notes/sub/a.md", "/notes/sub/deeper/b.md", "/notes-archive/x.md", "/top.md"]
    for path in paths:
        client.beta.memory_stores.memories.create(store.id, path=path, content=path)
    # Auto-pagination walks every page of the prefix, whole segments only, in path order.
    under = [
        m.path
        for m in client.beta.memory_stores.memories.list(store.id, path_prefix="/notes/", limit=7)
    ]
    assert under == sorted(p for p in paths if p.startswith("/notes/"))
    # Page by page, by hand: next_page is null only on the last page.
    seen: list[str] = []
    page = client.beta.memory_stores.memories.list(store.id, path_prefix="/notes/", limit=10)
    pages = 1
    while True:
        seen += [m.path for m in page.data]
        if page.next_page is None:
            break
        page = client.beta.memory_stores.memories.list(
            store.id, path_prefix="/notes/", limit=10, page=page.next_page
        )
        pages += 1
    assert (seen, pages) == (under, 5)
    # depth=1: files and prefixes, prefixes once, across pages too.
    children = list(
        client.beta.memory_stores.memories.list(store.id, path_prefix="/notes/", depth=1, limit=4)
    )
    kinds = [(c.type, c.path) for c in children]
    assert ("memory_prefix", "/notes/sub/") in kinds
    assert [k for k in kinds if k[0] == "memory_prefix"] == [("memory_prefix", "/notes/sub/")]
    assert len(kinds) == 46
    top = [(c.type, c.path) for c in client.beta.memory_stores.memories.list(store.id, depth=1)]
    assert top == [
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/top.md"),
    ]
    # Versions page too, newest first.
    versions = list(client.beta.memory_stores.memory_versions.list(store.id, limit=13))
    assert len(versions) == len(paths)
    assert [v.path for v in versions] == list(reversed(paths))


def test_conflicts_are_409_and_never_retried(api: Api) -> None:
    client = api.client(max_retries=2)
    store = client.beta.memory_stores.create(name="Conflicts")
    mem = client.beta.memory_stores.memories.create(store.id, path="/a.md", content="v1")
    path = f"/v1/memory_stores/{store.id}/memories/{mem.id}"
    before = api.server.settled_count("POST", path, 0)
    with pytest.raises(anthropic.ConflictError) as caught:
        client.beta.memory_stores.memories.update(
            mem.id,
            memory_store_id=store.id,
            content="v2",
            precondition={"type": "content_sha256", "content_sha256": sha("not it")},
        )
    assert caught.value.body["error"]["type"] == "memory_precondition_failed_error"  # type: ignore[index]
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert api.server.settled_count("POST", path, before + 1) == before + 1
    # The precondition holds also when the path changes; nothing changed.
    with pytest.raises(anthropic.ConflictError):
        client.beta.memory_stores.memories.update(
            mem.id,
            memory_store_id=store.id,
            path="/b.md",
            precondition={"type": "content_sha256", "content_sha256": sha("v0")},
        )
    got = client.beta.memory_stores.memories.retrieve(mem.id, memory_store_id=store.id)
    assert (got.path, got.content, got.memory_version_id) == ("/a.md", "v1", mem.memory_version_id)
    # Matching precondition with a rename applies.
    moved = client.beta.memory_stores.memories.update(
        mem.id,
        memory_store_id=store.id,
        path="/b.md",
        precondition={"type": "content_sha256", "content_sha256": sha("v1")},
    )
    assert moved.path == "/b.md"
    # Delete with a stale hash: 409, once; with the right one: gone.
    with pytest.raises(anthropic.ConflictError) as caught:
        client.beta.memory_stores.memories.delete(
            mem.id, memory_store_id=store.id, expected_content_sha256=sha("v2")
        )
    assert caught.value.body["error"]["type"] == "memory_precondition_failed_error"  # type: ignore[index]
    assert api.server.settled_count("DELETE", path, 1) == 1
    deleted = client.beta.memory_stores.memories.delete(
        mem.id, memory_store_id=store.id, expected_content_sha256=sha("v1")
    )
    assert (deleted.id, deleted.type) == (mem.id, "memory_deleted")
    # A taken path on create.
    client.beta.memory_stores.memories.create(store.id, path="/c.md", content="c")
    create_path = f"/v1/memory_stores/{store.id}/memories"
    before = api.server.settled_count("POST", create_path, 2)
    with pytest.raises(anthropic.ConflictError) as caught:
        client.beta.memory_stores.memories.create(store.id, path="/c.md", content="other")
    assert caught.value.body["error"]["type"] == "memory_path_conflict_error"  # type: ignore[index]
    assert api.server.settled_count("POST", create_path, before + 1) == before + 1


def test_versions_filters_and_redaction(api: Api) -> None:
    client = api.client()
    store = client.beta.memory_stores.create(name="Audit")
    session = client.beta.sessions.create(
        agent="agent_x",
        environment_id="env_x",
        resources=[{"type": "memory_store", "memory_store_id": store.id}],
    )
    token = api.service.create_session_token(session.id).token
    agent = api.client(token)
    a = client.beta.memory_stores.memories.create(store.id, path="/a.md", content="by key")
    b = agent.beta.memory_stores.memories.create(store.id, path="/b.md", content="by session")
    agent.beta.memory_stores.memories.update(b.id, memory_store_id=store.id, path="/c.md")
    by_session = client.beta.memory_stores.memory_versions.list(store.id, session_id=session.id)
    assert [(v.operation, v.path) for v in by_session] == [
        ("modified", "/c.md"),
        ("created", "/b.md"),
    ]
    assert all(
        v.created_by is not None and v.created_by.type == "session_actor" for v in by_session
    )
    by_key = client.beta.memory_stores.memory_versions.list(store.id, api_key_id=api.key_id)
    assert [v.memory_id for v in by_key] == [a.id]
    assert by_key.data[0].created_by.api_key_id == api.key_id  # type: ignore[union-attr]
    created = client.beta.memory_stores.memory_versions.list(store.id, operation="created")
    assert {v.memory_id for v in created} == {a.id, b.id}
    full = client.beta.memory_stores.memory_versions.list(store.id, memory_id=b.id, view="full")
    assert [v.content for v in full] == ["by session", "by session"]
    assert [v.content for v in client.beta.memory_stores.memory_versions.list(store.id)] == [
        None
    ] * 3
    future = datetime.now(UTC) + timedelta(minutes=1)
    assert (
        client.beta.memory_stores.memory_versions.list(store.id, created_at_gte=future).data == []
    )
    # The head of a live memory cannot be redacted; an older version can, once.
    head = client.beta.memory_stores.memories.retrieve(b.id, memory_store_id=store.id)
    with pytest.raises(anthropic.ConflictError, match="head"):
        client.beta.memory_stores.memory_versions.redact(
            head.memory_version_id, memory_store_id=store.id
        )
    old = full.data[1]
    redacted = client.beta.memory_stores.memory_versions.redact(old.id, memory_store_id=store.id)
    assert (
        redacted.content,
        redacted.content_sha256,
        redacted.path,
        redacted.content_size_bytes,
    ) == (
        None,
        None,
        None,
        None,
    )
    assert redacted.created_by == old.created_by
    assert redacted.redacted_by is not None
    assert redacted.redacted_by.type == "api_actor"
    again = client.beta.memory_stores.memory_versions.retrieve(old.id, memory_store_id=store.id)
    assert again == redacted


def test_sessions(api: Api) -> None:
    client = api.client()
    one = client.beta.memory_stores.create(name="Demo Memory", description="the demo")
    two = client.beta.memory_stores.create(name="demo memory")
    session = client.beta.sessions.create(
        agent="agent_1",
        environment_id="env_1",
        metadata={"ticket": "42"},
        title="a session",
        resources=[
            {"type": "memory_store", "memory_store_id": one.id, "instructions": "read first"},
            {"type": "memory_store", "memory_store_id": two.id, "access": "read_only"},
        ],
    )
    assert [(r.mount_path, r.access, r.name) for r in session.resources] == [  # type: ignore[union-attr]
        ("/mnt/memory/demo-memory", "read_write", "Demo Memory"),
        ("/mnt/memory/demo-memory-2", "read_only", "demo memory"),
    ]
    assert session.resources[0].instructions == "read first"  # type: ignore[union-attr]
    assert session.resources[0].description == "the demo"  # type: ignore[union-attr]
    assert (session.metadata, session.title, session.status) == (
        {"ticket": "42"},
        "a session",
        "idle",
    )
    assert client.beta.sessions.retrieve(session.id) == session
    listed = [s.id for s in client.beta.sessions.list(memory_store_id=two.id)]
    assert listed == [session.id]
    for bad in (
        [{"type": "memory_store", "memory_store_id": one.id}] * 2,
        [{"type": "memory_store", "memory_store_id": one.id, "access": "admin"}],
        [{"type": "memory_store", "memory_store_id": one.id, "instructions": "x" * 4097}],
        [{"type": "memory_store", "memory_store_id": "memstore_nope"}],
    ):
        with pytest.raises((anthropic.BadRequestError, anthropic.NotFoundError)):
            client.beta.sessions.create(agent="a", environment_id="e", resources=bad)  # type: ignore[arg-type]
