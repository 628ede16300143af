"""Search across a session's stores (issue 19): every attached store, nothing else, hits by
their path in the mount; the same over HTTP with the session's own token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mnemofs.store import MemoryService, make_engine

from .http_api import Api, api
from .test_http_transfer import curl

__all__ = ["api"]  # the fixture, used by name


def three_stores(service: MemoryService) -> tuple[str, str, str, str]:
    notes = service.create_store("Notes").id
    team = service.create_store("Team").id
    other = service.create_store("Other").id
    service.create_memory(notes, "/deploy.md", "how we deploy the blue service\n")
    service.create_memory(team, "/people.md", "Ana owns the blue service deploy\n")
    service.create_memory(other, "/secret-plan.md", "blue service outside this session\n")
    session = service.create_session(
        [{"memory_store_id": notes}, {"memory_store_id": team, "access": "read_only"}],
        mount_root="/mnt/memory",
    )
    return session.id, notes, team, other


def test_every_attached_store_and_nothing_else(service: MemoryService) -> None:
    session, notes, team, _ = three_stores(service)
    hits = service.search_session(session, "blue deploy")
    assert sorted(h.mount_path or "" for h in hits) == [
        "/mnt/memory/notes/deploy.md",
        "/mnt/memory/team/people.md",
    ]
    assert {h.memory_store_id for h in hits} == {notes, team}
    assert len(service.search_session(session, "blue", limit=1)) == 1


def test_over_http_with_the_sessions_token(api: Api) -> None:
    session, _, _, _ = three_stores(api.service)
    token = api.service.create_session_token(session).token
    assert token is not None
    url = f"{api.server.url}/mnemofs/v1/sessions/{session}/search?query=blue"
    status, body = curl(api, url, auth=token)
    assert status == 200
    paths = sorted(h["mount_path"] for h in json.loads(body)["data"])
    assert paths == ["/mnt/memory/notes/deploy.md", "/mnt/memory/team/people.md"]
    assert all(h["type"] == "search_hit" for h in json.loads(body)["data"])
    other = api.service.create_session([])
    status, _ = curl(
        api, f"{api.server.url}/mnemofs/v1/sessions/{other.id}/search?query=blue", auth=token
    )
    assert status == 403


def test_cli(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    svc = MemoryService(make_engine(f"sqlite:///{db}"), actor="api")
    session, _, _, _ = three_stores(svc)
    svc.close()

    def mnemofs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mnemofs", "--db", str(db), *args],
            capture_output=True,
            text=True,
        )

    done = mnemofs("search", "--session", session, "blue deploy")
    assert done.returncode == 0, done.stderr
    assert "/mnt/memory/notes/deploy.md" in done.stdout
    assert "secret-plan" not in done.stdout
    assert mnemofs("search", "Notes", "blue").returncode == 0
    assert mnemofs("search", "--session", session, "a", "b").returncode == 2
