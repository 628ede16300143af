"""Export and import over HTTP with an admin key (issue 18), driven with curl."""

from __future__ import annotations

import gzip
import json
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .http_api import Api, api
from .test_transfer import make_history, state

__all__ = ["api"]  # the fixture, used by name


def curl(api: Api, *args: str, auth: str | None = None) -> tuple[int, bytes]:
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-H",
            f"authorization: Bearer {auth or api.key}",
            *args,
        ],
        capture_output=True,
        check=True,
    )
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


def error_of(body: bytes) -> dict[str, Any]:
    return json.loads(body)["error"]  # type: ignore[no-any-return]


def test_export_then_import_over_http(api: Api, tmp_path: Path) -> None:
    sid = make_history(api.service)
    base = api.server.url + "/mnemofs/v1/memory_stores"
    status, body = curl(api, f"{base}/{sid}/export")
    assert status == 200
    lines = body.decode().splitlines()
    assert json.loads(lines[0])["format"] == "mnemofs-store-export"
    assert json.loads(lines[-1]) == {
        "record": "end",
        "directories": 1,
        "versions": 8,
        "memories": 3,
    }
    status, packed = curl(api, f"{base}/{sid}/export?gzip=true")
    assert status == 200
    assert gzip.decompress(packed).decode().splitlines()[1:] == lines[1:]
    file = tmp_path / "notes.jsonl.gz"
    file.write_bytes(packed)

    status, body = curl(api, "-X", "POST", "--data-binary", f"@{file}", f"{base}/import?name=Moved")
    assert status == 200, body
    store = json.loads(body)
    assert store["type"] == "memory_store"
    assert store["name"] == "Moved"
    assert store["memory_count"] == 3
    mine, theirs = state(api.service, sid, ids=False), state(api.service, store["id"], ids=False)
    mine["store"].pop("name")
    theirs["store"].pop("name")
    assert theirs == mine

    # The same ids again: 409, nothing made.
    status, body = curl(
        api, "-X", "POST", "--data-binary", f"@{file}", f"{base}/import?keep_ids=true"
    )
    assert status == 409
    assert "already exists" in error_of(body)["message"]


def test_bad_files_and_callers_are_refused(api: Api, tmp_path: Path) -> None:
    sid = api.service.create_store("Plain").id
    before = [s.id for s in api.service.list_stores()]
    base = api.server.url + "/mnemofs/v1/memory_stores"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "mnemofs-store-export", "version": 1}\n{oops\n')
    status, body = curl(api, "-X", "POST", "--data-binary", f"@{bad}", f"{base}/import")
    assert status == 400
    assert (
        error_of(body)["message"] == "the request body: line 2 is not JSON (Expecting "
        "property name enclosed in double quotes: line 1 column 2 (char 1))"
    )
    assert [s.id for s in api.service.list_stores()] == before

    session = api.service.create_session([{"memory_store_id": sid}])
    token = api.service.create_session_token(session.id).token
    status, body = curl(api, f"{base}/{sid}/export", auth=token)
    assert status == 403
    status, body = curl(api, "-X", "POST", "--data-binary", f"@{bad}", f"{base}/import", auth=token)
    assert status == 403
    status, body = curl(api, f"{base}/memstore_01M8RP364Q6VPXAR90TJES6HH9/export")
    assert status == 404


def test_restore_and_fork_over_http(api: Api) -> None:
    service = api.service
    sid = service.create_store("Timeline").id
    memory = service.create_memory(sid, "/a.md", "good\n")
    at = memory.created_at
    time.sleep(0.002)
    service.update_memory(sid, memory.id, content="bad\n")
    base = f"{api.server.url}/mnemofs/v1/memory_stores/{sid}"
    query = "at=" + quote(at)

    session = service.create_session([{"memory_store_id": sid}])
    token = service.create_session_token(session.id).token
    assert token is not None
    before = [v.id for v in service.list_versions(sid)]
    status, _ = curl(api, "-X", "POST", f"{base}/restore?{query}", auth=token)
    assert status == 403  # an admin's
    status, body = curl(api, "-X", "POST", f"{base}/restore?{query}&dry_run=true")
    assert status == 200
    assert json.loads(body) == {
        "data": [{"action": "modify", "memory_id": memory.id, "path": "/a.md", "was": None}],
        "dry_run": True,
    }
    assert [v.id for v in service.list_versions(sid)] == before  # neither changed anything
    status, body = curl(api, "-X", "POST", f"{base}/restore?{query}")
    assert status == 200
    assert service.find_memory(sid, "/a.md").content == "good\n"
    newest = service.list_versions(sid).data[0]
    assert newest.created_by is not None
    assert newest.created_by.id == api.key_id  # signed by the key that asked

    status, body = curl(api, "-X", "POST", f"{base}/fork?{query}&name=Then")
    assert status == 200
    fork = json.loads(body)
    assert fork["metadata"] == {"forked_from": sid, "forked_at": at}
    status, body = curl(api, "-X", "POST", f"{base}/restore?at=2020-01-01T00:00:00Z")
    assert status == 400
    assert "did not exist yet" in error_of(body)["message"]
