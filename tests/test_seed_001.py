"""docs/seed-001.md, run as written, then the seed's promises checked (issue 20): the 501st
record evicts the least recently accessed one across users; a user never sees another's
records (mount, context, search, HTTP); general memory is visible to all; 10 KiB per record;
injection capped at 4,000 words."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnemofs.errors import ContentTooLarge
from mnemofs.store import MemoryService, make_engine

from .mounted import mounted
from .served import serving

pytestmark = pytest.mark.mounted

DOC = Path(__file__).resolve().parent.parent / "docs" / "seed-001.md"


def doc_script() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    return blocks[0]


def run_doc(tmp_path: Path, db: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "mnemofs"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m mnemofs "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "MNEMOFS_DB": db, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", doc_script()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def curl(url: str, credential: str) -> tuple[int, bytes]:
    done = subprocess.run(
        ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-H", f"x-api-key: {credential}", url],
        capture_output=True,
        check=True,
    )
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


def test_the_seed_as_documented(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'seed.db'}"
    done = run_doc(tmp_path, db)
    assert done.returncode == 0, done.stderr
    # The turn's context and search, as the doc prints them: the user's record and general's.
    assert "Prefers concise status updates." in done.stdout
    assert "Status reports go out every Monday." in done.stdout
    assert "/prefs/status.md" in done.stdout

    service = MemoryService(make_engine(db), actor="api")
    try:
        stores = {s.name: s for s in service.list_stores(limit=100)}
        general = stores["agent-1 general"].id
        alice, bob = stores["agent-1 app-user-42"].id, stores["agent-1 app-user-43"].id
        pool = service.get_pool(service.resolve_pool("agent-1"))
        assert sorted(pool.memory_store_ids) == sorted([general, alice, bob])

        # 10 KiB per record.
        with pytest.raises(ContentTooLarge, match="10240 bytes"):
            service.create_memory(alice, "/big.md", "x" * 10_241)

        # Fill the pool to its 500 records across users; then read the oldest of bob's, so
        # the least recently accessed record is alice's oldest.
        for i in range(498):
            store = (general, alice, bob)[i % 3]
            service.create_memory(store, f"/fill/{i}.md", f"record {i}")
            if i < 3:
                time.sleep(0.002)  # the oldest ones apart in time
        assert service.get_pool(pool.id).memory_count == 500
        oldest_bob = service.find_memory(bob, "/fill/2.md")
        service.get_memory(bob, oldest_bob.id)
        service.flush_accesses()
        policy = service.find_memory(general, "/policy/reports.md")
        service.get_memory(general, policy.id)  # read: recently accessed
        service.flush_accesses()
        time.sleep(0.002)
        # The 501st record: the least recently accessed of the whole pool goes.
        service.create_memory(bob, "/prefs/new.md", "Likes bullet points.")
        assert service.get_pool(pool.id).memory_count == 500
        evicted = {
            v.path
            for s in (general, alice, bob)
            for v in service.list_versions(s, operation="deleted", limit=100)
        }
        assert evicted == {"/prefs/status.md"}  # alice's, made first and never read since
        service.create_memory(alice, "/prefs/status.md", "Prefers concise status updates.")

        # Each user sees general memory and their own, never the other's.
        sessions = {u: service.create_session(user=u) for u in ("app-user-42", "app-user-43")}
        for user, own, other in (("app-user-42", alice, bob), ("app-user-43", bob, alice)):
            session = sessions[user]
            attached = {a.memory_store_id for a in session.resources}
            assert attached == {general, own}
            text = service.context(session.id, max_words=4000)
            assert "Status reports go out every Monday." in text
            assert len(text.split()) <= 4000 + 200  # the words of memory, plus the framing
            assert ("Prefers concise" in text) == (user == "app-user-42")
            hits = service.search_session(session.id, "concise status")
            assert all(h.memory_store_id != other for h in hits)
            hits = service.search_pool(pool.id, "bullet points", user=user)
            assert bool(hits) == (user == "app-user-43")

        # Over HTTP, with each session's own token.
        key = service.create_api_key("seed").key
        assert key is not None
        token = service.create_session_token(sessions["app-user-42"].id).token
        assert token is not None
        with serving(db, tmp_path / "server.log") as server:
            base = f"{server.url}/mnemofs/v1"
            alice_session = sessions["app-user-42"].id
            status, body = curl(f"{base}/memory_stores/{bob}/search?query=bullet", token)
            assert status == 404  # another user's store: not there for this token
            status, body = curl(f"{base}/sessions/{alice_session}/context", token)
            assert status == 200
            context = json.loads(body)["context"]
            assert "Prefers concise status updates." in context
            assert "Likes bullet points" not in context
            query = f"{base}/pools/{pool.id}/search?query=bullet&user_id=app-user-42"
            assert curl(query, token)[0] == 403  # a pool is the admin's
            status, body = curl(query, key)
            assert status == 200
            assert json.loads(body)["data"] == []

        # Through a mount of alice's session: general and alice's stores only.
        root = tmp_path / "mnt"
        session = service.create_session(user="app-user-42", mount_root=str(root))
        with mounted(db, session.id, root):
            names = sorted(os.listdir(root))
            assert len(names) == 2
            texts = [p.read_text() for p in root.rglob("*.md") if ".history" not in p.parts]
            assert "Prefers concise status updates." in texts
            assert "Likes bullet points." not in texts

        # Injection stops at 4,000 words of memory: four 10 KiB records (4,400 words), the
        # newest of everyone's, and the fourth is cut where the cap falls.
        for i in range(4):
            service.create_memory(general, f"/long/{i}.md", "longword " * 1_100)
        text = service.context(sessions["app-user-43"].id, max_words=4000)
        assert text.count("longword") == 4000
        assert "[…]" in text
    finally:
        service.close()
