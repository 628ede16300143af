"""Whole-store restore and fork (issue 19), against a model of the history at each moment."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemofs.errors import InvalidRequest, StoreArchived
from mnemofs.store import MemoryService

PATHS = ["/a.md", "/b.md", "/d/c.md", "/d/e.md"]
TEXTS = ["one\n", "two\n", "three\n"]

Op = tuple[str, int, int]  # (kind, path index, text index)
ops_strategy = st.lists(
    st.tuples(
        st.sampled_from(["create", "update", "rename", "delete"]),
        st.integers(0, len(PATHS) - 1),
        st.integers(0, len(TEXTS) - 1),
    ),
    min_size=1,
    max_size=20,
)


def live(service: MemoryService, store_id: str) -> dict[str, tuple[str, str]]:
    """path -> (memory id, content) of every live memory."""
    return {
        m.path: (m.id, m.content or "")
        for m in service.list_memories(store_id, view="full", limit=20)
    }


def newest_time(service: MemoryService, store_id: str) -> str | None:
    page = service.list_versions(store_id, limit=1)
    return page.data[0].created_at if page.data else None


def play(service: MemoryService, store_id: str, ops: list[Op]) -> list[tuple[str, Any]]:
    """Apply ``ops`` (skipping the impossible ones); after each, the newest version's time
    and what the store then holds."""
    moments: list[tuple[str, Any]] = []
    for kind, p, t in ops:
        now = live(service, store_id)
        path, text = PATHS[p], TEXTS[t]
        occupied = [q for q in PATHS if q in now]
        if kind == "create" and path not in now:
            service.create_memory(store_id, path, text)
        elif kind == "update" and occupied:
            target = occupied[p % len(occupied)]
            service.update_memory(store_id, now[target][0], content=text)
        elif kind == "rename" and occupied and path not in now:
            source = occupied[t % len(occupied)]
            service.update_memory(store_id, now[source][0], path=path)
        elif kind == "delete" and occupied:
            service.delete_memory(store_id, now[occupied[p % len(occupied)]][0])
        else:
            continue
        moment = newest_time(service, store_id)
        assert moment is not None
        moments.append((moment, live(service, store_id)))
    return moments


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=ops_strategy, pick=st.integers(0, 1000), later=ops_strategy)
def test_restore_and_fork_match_the_history(
    service: MemoryService, ops: list[Op], pick: int, later: list[Op]
) -> None:
    store = service.create_store("Model").id
    moments = play(service, store, ops)
    if not moments:
        return
    at = moments[pick % len(moments)][0]
    # What the store held at ``at``: after the last change made at or before it.
    expected = [state for moment, state in moments if moment <= at][-1]
    time.sleep(0.002)  # times have milliseconds: what follows is after ``at``
    play(service, store, later)

    fork = service.fork_store(store, at, name="Fork")
    assert {p: c for p, (_, c) in live(service, fork.id).items()} == {
        p: c for p, (_, c) in expected.items()
    }
    assert json.loads(json.dumps(fork.metadata)) == {"forked_from": store, "forked_at": at}

    before = len(list(service.list_versions(store, limit=100)))
    plan = service.restore_store(store, at, dry_run=True)
    assert len(list(service.list_versions(store, limit=100))) == before  # a plan changes nothing
    steps = service.restore_store(store, at)
    assert [str(s) for s in steps] == [str(s) for s in plan]
    assert live(service, store) == expected  # ids too: a re-created memory keeps its id
    assert len(list(service.list_versions(store, limit=100))) == before + len(steps)
    assert service.restore_store(store, at) == []  # already so
    assert service.get_store(store).memory_count == len(expected)
    assert service.check().ok


def test_refusals(service: MemoryService) -> None:
    store = service.create_store("Notes").id
    memory = service.create_memory(store, "/a.md", "first\n")
    at = memory.created_at

    def versions() -> list[str]:
        return [v.id for v in service.list_versions(store, limit=100)]

    with pytest.raises(InvalidRequest, match="did not exist yet"):
        service.restore_store(store, "2020-01-01T00:00:00Z")
    with pytest.raises(InvalidRequest, match="RFC 3339"):
        service.restore_store(store, "yesterday")
    time.sleep(0.002)  # times have milliseconds: the second version must come after ``at``
    service.update_memory(store, memory.id, content="second\n")
    service.redact_version(store, memory.memory_version_id)
    with pytest.raises(InvalidRequest, match="was redacted"):
        service.restore_store(store, at)
    with pytest.raises(InvalidRequest, match="was redacted"):
        service.fork_store(store, at, name="F")
    # Refused restores and forks changed nothing.
    before = versions()
    with pytest.raises(InvalidRequest, match="was redacted"):
        service.restore_store(store, at)
    assert versions() == before
    assert service.find_memory(store, "/a.md").content == "second\n"
    assert [s.name for s in service.list_stores()] == ["Notes"]

    journal = service.create_store("Turns", kind="journal").id
    line = service.append_journal(journal, '{"turn": 1}\n')
    with pytest.raises(InvalidRequest, match="journal"):
        service.restore_store(journal, line.created_at)

    pruned = service.create_store("Pruned").id
    old = service.create_memory(pruned, "/p.md", "v1\n")
    service.update_memory(pruned, old.id, content="v2\n")
    time.sleep(0.002)
    assert service.prune_versions(pruned, older_than_days=0, keep_last=1) == 1
    with pytest.raises(InvalidRequest, match="was pruned"):
        service.restore_store(pruned, old.created_at)

    service.archive_store(store)
    with pytest.raises(StoreArchived):
        service.restore_store(store, service.get_store(store).created_at)


def test_cli_restore_and_fork(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")

    def mnemofs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mnemofs", "--db", db, *args], capture_output=True, text=True
        )

    mnemofs("stores", "create", "Notes")
    created = json.loads(
        mnemofs("--json", "memories", "create", "Notes", "/a.md", "--content", "good\n").stdout
    )
    at = created["updated_at"]
    mnemofs("memories", "update", "Notes", "/a.md", "--content", "bad\n")
    mnemofs("memories", "create", "Notes", "/b.md", "--content", "new\n")
    plan = mnemofs("stores", "restore", "Notes", "--at", at, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines() == [
        "delete    /b.md",
        "modify    /a.md",
        "2 memories would change",
    ]
    assert mnemofs("memories", "cat", "Notes", "/a.md").stdout == "bad\n"
    done = mnemofs("stores", "restore", "Notes", "--at", at)
    assert done.returncode == 0, done.stderr
    assert mnemofs("memories", "cat", "Notes", "/a.md").stdout == "good\n"
    versions = json.loads(mnemofs("--json", "versions", "list", "Notes").stdout)["data"]
    assert versions[0]["created_by"] == {
        "type": "service_account_actor",
        "service_account_id": "cli",
    }
    fork = json.loads(
        mnemofs("--json", "stores", "fork", "Notes", "--at", at, "--name", "F").stdout
    )
    assert fork["metadata"]["forked_from"].startswith("memstore_")
    refused = mnemofs("stores", "restore", "Notes", "--at", "2020-01-01T00:00Z")
    assert refused.returncode == 2
    assert "did not exist yet" in refused.stderr
