"""The HTTP API with real clients other than the SDK: the seed's curl examples, who may do
what (keys, session tokens, nothing), bad input, a body cap, concurrency, a graceful stop."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import anthropic
import pytest

from .http_api import Api, api, seed_blocks
from .served import serving

__all__ = ["api"]  # the fixture, used by name


def call(
    api: Api,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    auth: str | None = "key",
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One request with http.client: status, JSON body, headers."""
    url = urlsplit(api.server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    sent = dict(headers or {})
    if auth == "key":
        sent.setdefault("authorization", f"Bearer {api.key}")
    elif auth is not None:
        sent.setdefault("authorization", f"Bearer {auth}")
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    if data is not None:
        sent.setdefault("content-type", "application/json")
    try:
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload or b"null"), dict(response.getheaders())
    finally:
        conn.close()


def snapshot(api: Api) -> Any:
    """Everything a refused request must leave as it was."""
    s = api.service
    stores = list(s.list_stores(include_archived=True, limit=100))
    out = []
    for store in stores:
        memories = [(m.id, m.path, m.content_sha256) for m in s.list_memories(store.id, limit=100)]
        versions = [(v.id, v.redacted_at) for v in s.list_versions(store.id, limit=100)]
        out.append((store, memories, versions))
    sessions = [(x.id, x.ended_at) for x in s.list_sessions(limit=100)]
    return out, sessions, s.list_api_keys()


def test_seed_curl_examples(api: Api) -> None:
    """Every curl example of the seed, with its own header names (x-api-key, vendor version
    and beta headers), against the server."""
    blocks = [b for b in seed_blocks("bash") if b.startswith("curl")]
    assert len(blocks) == 14
    env = {"PATH": "/usr/bin:/bin", "JUGLOW_API_KEY": api.key}

    def run(index: int) -> Any:
        script = blocks[index].replace("https://haijun.my.id", api.server.url)
        done = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout) if done.stdout.strip() else None

    store = run(0)
    assert store["type"] == "memory_store"
    env["store_id"] = store["id"]
    assert run(1) is None  # its output goes to /dev/null
    env.update(agent_id="agent_curl", environment_id="env_curl")
    session = run(2)
    assert session["resources"][0]["mount_path"] == "/mnt/memory/user-preferences"
    mem = run(5)
    env.update(mem_id=mem["id"], mem_sha=mem["content_sha256"])
    listing = run(3)
    assert [m["path"] for m in listing["data"]] == [
        "/formatting_standards.md",
        "/preferences/formatting.md",
    ]
    assert run(4)["content"] == "Always use tabs, not spaces."
    run(6)  # rename
    run(7)  # content, with the precondition
    got = api.service.get_memory(store["id"], mem["id"])
    assert (got.path, got.content) == (
        "/archive/2026_q1_formatting.md",
        "CORRECTED: Always use 2-space indentation.",
    )
    versions = run(9)["data"]
    assert [v["operation"] for v in versions] == ["modified", "modified", "created"]
    env["version_id"] = versions[1]["id"]
    assert run(10)["path"] == "/archive/2026_q1_formatting.md"
    assert run(11)["redacted_at"]
    assert run(13) is None  # to /dev/null
    assert api.service.get_store(store["id"]).archived_at is not None
    run(8)  # delete (an archived store allows it)
    listed = run(12)
    assert any(s["id"] == store["id"] and s["archived_at"] for s in listed["data"])


def test_credentials(api: Api) -> None:
    """No credential, a malformed one, an unknown one, a revoked key: 401, nothing changed."""
    made = api.service.create_api_key("short-lived")
    assert made.key is not None
    status, _, _ = call(api, "GET", "/v1/memory_stores", auth=made.key)
    assert status == 200
    status, _, _ = call(api, "GET", "/v1/memory_stores", headers={"x-api-key": made.key}, auth=None)
    assert status == 200
    before = snapshot(api)
    forged = made.key[:-4] + ("AAAA" if not made.key.endswith("AAAA") else "BBBB")
    for headers in (
        {},
        {"authorization": "Basic dXNlcjpwYXNz"},
        {"authorization": "Bearer"},
        {"authorization": "Bearer not-a-key"},
        {"authorization": f"Bearer {forged}"},
        {"x-api-key": forged},
        {"authorization": "Bearer " + "x" * 10_000},
    ):
        status, body, response_headers = call(
            api, "POST", "/v1/memory_stores", {"name": "nope"}, headers=headers, auth=None
        )
        assert status == 401, headers
        assert body["error"]["type"] == "authentication_error"
        assert body["request_id"] == response_headers["request-id"]
        assert response_headers["x-should-retry"] == "false"
    # A bad body without a credential is still 401 (credentials are checked first).
    status, _, _ = call(api, "POST", "/v1/memory_stores", raw=b"{not json", auth=None)
    assert status == 401
    api.service.revoke_api_key(made.id)
    status, body, _ = call(api, "GET", "/v1/memory_stores", auth=made.key)
    assert (status, body["error"]["type"]) == (401, "authentication_error")
    with pytest.raises(anthropic.AuthenticationError):
        api.client(made.key).beta.memory_stores.list()
    assert snapshot(api)[0] == before[0]
    # Keys over HTTP: created once with the secret, listed without.
    status, key, _ = call(api, "POST", "/mnemofs/v1/api_keys", {"name": "ci"})
    assert (status, key["type"], key["key"].startswith("mnemofs-key-")) == (200, "api_key", True)
    status, keys, _ = call(api, "GET", "/mnemofs/v1/api_keys")
    assert all(k["key"] is None for k in keys["data"])
    status, revoked, _ = call(api, "POST", f"/mnemofs/v1/api_keys/{key['id']}/revoke")
    assert revoked["revoked_at"]
    assert call(api, "GET", "/v1/memory_stores", auth=key["key"])[0] == 401


def test_session_token_scope(api: Api) -> None:
    """A battery of what session A's token tries: its own stores as their access allows,
    nothing of session B's, nothing an admin does. Every refusal leaves the database as it
    was."""
    s = api.service
    mine = s.create_store("Mine")
    shared = s.create_store("Shared")
    theirs = s.create_store("Theirs")
    own = s.create_memory(mine.id, "/own.md", "mine")
    ref = s.create_memory(shared.id, "/ref.md", "reference")
    other = s.create_memory(theirs.id, "/secret.md", "theirs")
    a = s.create_session(
        [
            {"type": "memory_store", "memory_store_id": mine.id},
            {"type": "memory_store", "memory_store_id": shared.id, "access": "read_only"},
        ]
    )
    b = s.create_session([{"type": "memory_store", "memory_store_id": theirs.id}])
    token = s.create_session_token(a.id).token
    assert token is not None
    agent = api.client(token)
    # What it may do.
    assert agent.beta.sessions.retrieve(a.id).id == a.id
    assert {x.id for x in agent.beta.memory_stores.list()} == {mine.id, shared.id}
    assert agent.beta.memory_stores.retrieve(shared.id).name == "Shared"
    assert agent.beta.memory_stores.memories.retrieve(ref.id, memory_store_id=shared.id).content
    assert agent.beta.memory_stores.memory_versions.list(shared.id).data
    made = agent.beta.memory_stores.memories.create(mine.id, path="/new.md", content="n")
    written = s.list_versions(mine.id, memory_id=made.id).data[0]
    assert written.created_by is not None
    assert (written.created_by.type, written.created_by.id) == ("session_actor", a.id)
    agent.beta.memory_stores.memories.update(own.id, memory_store_id=mine.id, content="mine 2")
    agent.beta.memory_stores.memories.delete(made.id, memory_store_id=mine.id)
    before = snapshot(api)
    version = s.list_versions(mine.id).data[-1].id
    attempts: list[tuple[str, str, Any, int]] = [
        # read_only store: every write is 403
        ("POST", f"/v1/memory_stores/{shared.id}/memories", {"path": "/x.md", "content": "x"}, 403),
        ("POST", f"/v1/memory_stores/{shared.id}/memories/{ref.id}", {"content": "x"}, 403),
        ("DELETE", f"/v1/memory_stores/{shared.id}/memories/{ref.id}", None, 403),
        # session B's store: not found, whatever the call
        ("GET", f"/v1/memory_stores/{theirs.id}", None, 404),
        ("GET", f"/v1/memory_stores/{theirs.id}/memories", None, 404),
        ("GET", f"/v1/memory_stores/{theirs.id}/memories/{other.id}", None, 404),
        ("POST", f"/v1/memory_stores/{theirs.id}/memories/{other.id}", {"content": "x"}, 404),
        ("DELETE", f"/v1/memory_stores/{theirs.id}/memories/{other.id}", None, 404),
        ("POST", f"/v1/memory_stores/{theirs.id}/memories", {"path": "/y", "content": "y"}, 404),
        ("GET", f"/v1/memory_stores/{theirs.id}/memory_versions", None, 404),
        # a memory of B's through A's own store id: not found either
        ("GET", f"/v1/memory_stores/{mine.id}/memories/{other.id}", None, 404),
        # admin endpoints
        ("POST", "/v1/memory_stores", {"name": "mine now"}, 403),
        ("POST", f"/v1/memory_stores/{mine.id}", {"name": "renamed"}, 403),
        ("POST", f"/v1/memory_stores/{mine.id}/archive", None, 403),
        ("DELETE", f"/v1/memory_stores/{mine.id}", None, 403),
        ("POST", f"/v1/memory_stores/{mine.id}/memory_versions/{version}/redact", None, 403),
        ("POST", "/v1/sessions", {"resources": []}, 403),
        ("GET", "/v1/sessions", None, 403),
        ("GET", f"/v1/sessions/{b.id}", None, 403),
        ("POST", f"/mnemofs/v1/sessions/{a.id}/tokens", None, 403),
        ("POST", f"/mnemofs/v1/sessions/{a.id}/end", None, 403),
        ("POST", "/mnemofs/v1/api_keys", {"name": "escalate"}, 403),
        ("GET", "/mnemofs/v1/api_keys", None, 403),
    ]
    for method, path, body, expected in attempts:
        status, reply, headers = call(api, method, path, body, auth=token)
        assert status == expected, (method, path, reply)
        kind = {403: "permission_error", 404: "not_found_error"}[expected]
        assert reply["error"]["type"] == kind
        assert headers["x-should-retry"] == "false"
        if expected == 404:
            # Said exactly as for a store or memory that does not exist: nothing is told.
            ghosts = {theirs.id: "memstore_0000000000000000000000NONE", other.id: "mem_NONE"}
            ghost = path
            for real, fake in ghosts.items():
                ghost = ghost.replace(real, fake)
            _, unknown, _ = call(api, method, ghost, body, auth=token)
            said = reply["error"]["message"]
            for real, fake in ghosts.items():
                said = said.replace(real, fake)
            assert said == unknown["error"]["message"], (path, reply, unknown)
    assert snapshot(api) == before
    # An ended session's token is dead.
    s.end_session(a.id)
    status, reply, _ = call(api, "GET", f"/v1/sessions/{a.id}", auth=token)
    assert (status, reply["error"]["type"]) == (401, "authentication_error")
    # Tokens over HTTP (admin), and none for an ended session.
    status, made_token, _ = call(api, "POST", f"/mnemofs/v1/sessions/{b.id}/tokens")
    assert status == 200
    assert made_token["token"].startswith("mnemofs-token-")
    assert call(api, "GET", f"/v1/sessions/{b.id}", auth=made_token["token"])[0] == 200
    assert call(api, "POST", f"/mnemofs/v1/sessions/{a.id}/tokens")[0] == 400


def test_bad_input_is_a_4xx_in_the_wire_shape(api: Api) -> None:
    s = api.service
    store = s.create_store("Bad input")
    mem = s.create_memory(store.id, "/a.md", "a")
    base = f"/v1/memory_stores/{store.id}"
    other_query = s.list_memories(store.id, path_prefix="/", limit=1)
    s.create_memory(store.id, "/b.md", "b")
    cursor = s.list_memories(store.id, path_prefix="/", limit=1).next_page
    assert other_query is not None
    assert cursor
    before = snapshot(api)
    cases: list[tuple[str, str, Any, bytes | None, int, str]] = [
        ("POST", f"{base}/memories", None, b"{not json", 400, "JSON"),
        ("POST", f"{base}/memories", None, b'{"path": "/x.md", "content": "\xff\xfe"}', 400, ""),
        ("POST", f"{base}/memories", {"path": "/x.md", "content": 5}, None, 400, "content"),
        ("POST", f"{base}/memories", {"path": "/x.md"}, None, 400, "content"),
        ("POST", f"{base}/memories", {"content": "x"}, None, 400, "path"),
        ("POST", f"{base}/memories", [1, 2], None, 400, ""),
        ("POST", f"{base}/memories", {"path": "x.md", "content": "x"}, None, 400, "absolute"),
        ("POST", f"{base}/memories", {"path": "/a/../b", "content": "x"}, None, 400, ".."),
        ("POST", f"{base}/memories", {"path": "/a//b", "content": "x"}, None, 400, "empty"),
        ("POST", f"{base}/memories", {"path": "/a\u2028b", "content": "x"}, None, 400, "U+2028"),
        ("POST", f"{base}/memories", {"path": "/cafe\u0301", "content": "x"}, None, 400, "NFC"),
        ("POST", f"{base}/memories", {"path": "/a\u0000b", "content": "x"}, None, 400, "control"),
        (
            "POST",
            f"{base}/memories",
            {"path": "/" + "a/" * 20 + "b", "content": "x"},
            None,
            400,
            "segments",
        ),
        (
            "POST",
            f"{base}/memories",
            {"path": "/" + "a" * 1100, "content": "x"},
            None,
            400,
            "bytes",
        ),
        (
            "POST",
            f"{base}/memories",
            {"path": "/x.md", "content": "x" * 102_401},
            None,
            413,
            "102400",
        ),
        ("POST", f"{base}/memories", {"path": "/x.md", "content": "\u0000"}, None, 400, "NUL"),
        (
            "POST",
            f"{base}/memories?view=partial",
            {"path": "/x.md", "content": "x"},
            None,
            400,
            "view",
        ),
        (
            "POST",
            f"{base}/memories/{mem.id}",
            {"precondition": {"type": "etag", "content_sha256": "0" * 64}, "content": "z"},
            None,
            400,
            "precondition",
        ),
        (
            "POST",
            f"{base}/memories/{mem.id}",
            {"content": "z", "precondition": {"type": "content_sha256", "content_sha256": "xyz"}},
            None,
            400,
            "SHA-256",
        ),
        ("POST", f"{base}/memories/{mem.id}", {}, None, 400, "nothing to update"),
        (
            "DELETE",
            f"{base}/memories/{mem.id}?expected_content_sha256=nothex",
            None,
            None,
            400,
            "SHA-256",
        ),
        ("GET", f"{base}/memories?depth=2", None, None, 400, "depth"),
        ("GET", f"{base}/memories?depth=one", None, None, 400, "depth"),
        ("GET", f"{base}/memories?limit=0", None, None, 400, "limit"),
        ("GET", f"{base}/memories?limit=101", None, None, 400, "limit"),
        ("GET", f"{base}/memories?path_prefix=notes", None, None, 400, "path_prefix"),
        ("GET", f"{base}/memories?path_prefix=/&page=garbage", None, None, 400, "cursor"),
        ("GET", f"{base}/memories?path_prefix=/a/&page={cursor}", None, None, 400, "another query"),
        ("GET", f"{base}/memory_versions?page={cursor}", None, None, 400, "another query"),
        ("GET", f"{base}/memory_versions?operation=renamed", None, None, 400, "operation"),
        ("GET", f"{base}/memory_versions?created_at[gte]=yesterday", None, None, 400, "created_at"),
        ("GET", "/v1/memory_stores?include_archived=maybe", None, None, 400, "include_archived"),
        ("POST", "/v1/memory_stores", {"name": ""}, None, 400, "name"),
        ("POST", "/v1/memory_stores", {"name": "x" * 256}, None, 400, "255"),
        ("POST", "/v1/memory_stores", {"name": "x", "description": "d" * 1025}, None, 400, "1024"),
        ("POST", "/v1/memory_stores", {"name": "x", "metadata": {"k": 1}}, None, 400, "metadata"),
        (
            "POST",
            "/v1/sessions",
            {"resources": [{"type": "file", "memory_store_id": store.id}]},
            None,
            400,
            "type",
        ),
        (
            "POST",
            "/v1/sessions",
            {
                "resources": [
                    {"type": "memory_store", "memory_store_id": store.id, "access": "root"}
                ]
            },
            None,
            400,
            "access",
        ),
        ("GET", "/v1/no/such/route", None, None, 404, "no such endpoint"),
        ("PUT", f"{base}/memories/{mem.id}", {"content": "x"}, None, 405, "not allowed"),
        ("GET", "/v1/memory_stores/memstore_nope", None, None, 404, "memstore_nope"),
        ("GET", f"{base}/memories/mem_nope", None, None, 404, "mem_nope"),
    ]
    for method, path, body, raw, expected, words in cases:
        status, reply, headers = call(api, method, path, body, raw=raw)
        assert status == expected, (method, path, reply)
        assert set(reply) == {"type", "error", "request_id"}
        assert set(reply["error"]) <= {"type", "message", "mnemofs_error"}
        assert reply["type"] == "error"
        assert reply["error"]["message"]
        assert words in reply["error"]["message"], (path, reply)
        wanted = {
            400: "invalid_request_error",
            404: "not_found_error",
            405: "invalid_request_error",
            413: "request_too_large",
        }[expected]
        assert reply["error"]["type"] == wanted
        assert headers["x-should-retry"] == "false"
    assert snapshot(api) == before


def test_a_json_body_sent_as_a_form_says_what_to_send(api: Api) -> None:
    """``curl -d '{...}'`` without ``-H 'content-type: application/json'`` sends the JSON as a
    form: a 400 that names the header to send (not the framework's "valid dictionary"), and
    nothing made. The same body with the header is a store."""
    before = snapshot(api)
    url = f"{api.server.url}/v1/memory_stores"
    auth = ["-H", f"authorization: Bearer {api.key}"]
    body = ["-d", '{"name": "Sent as a form"}']
    done = subprocess.run(
        ["curl", "-s", "-w", "\\n%{http_code}", *auth, *body, url],
        capture_output=True,
        text=True,
        check=True,
    )
    reply, status = done.stdout.rsplit("\n", 1)
    assert status == "400"
    error = json.loads(reply)["error"]
    assert error["type"] == "invalid_request_error"
    assert "content-type: application/json" in error["message"], error
    assert "application/x-www-form-urlencoded" in error["message"], error
    assert snapshot(api) == before
    json_header = ["-H", "content-type: application/json"]
    made = subprocess.run(
        ["curl", "-s", *auth, *json_header, *body, url], capture_output=True, text=True, check=True
    )
    assert json.loads(made.stdout)["name"] == "Sent as a form"


def raw_exchange(api: Api, head: bytes, chunks: list[bytes]) -> tuple[int, dict[str, Any]]:
    """Send a request by hand (the server may answer and close before all of it is sent) and
    read the answer."""
    url = urlsplit(api.server.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        try:
            sock.sendall(head)
            for chunk in chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read: what we are testing
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
    status = int(answer.split(b" ", 2)[1])
    return status, json.loads(answer.split(b"\r\n\r\n", 1)[1].split(b"\r\n0\r\n")[0] or b"null")


def test_oversize_bodies_are_refused_before_parsing(api: Api) -> None:
    store = api.service.create_store("Big")
    path = f"/v1/memory_stores/{store.id}/memories"
    headers = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.key}\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
    )
    # A declared length over the cap: refused with nothing of the body sent at all.
    status, reply = raw_exchange(api, (headers + "Content-Length: 1000000\r\n\r\n").encode(), [])
    assert (status, reply["error"]["type"]) == (413, "request_too_large")
    # Chunked, with no length up front: counted as it arrives.
    piece = b"x" * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 16 + [b"0\r\n\r\n"]
    head = (headers + "Transfer-Encoding: chunked\r\n\r\n").encode()
    status, reply = raw_exchange(api, head, chunks)
    assert (status, reply["error"]["type"]) == (413, "request_too_large")
    assert api.service.list_memories(store.id).data == []
    # Content that the escaping grows (a control character is six bytes of JSON) still fits.
    text = "\u0001" * 100_000
    status, made, _ = call(api, "POST", path, {"path": "/ctl.md", "content": text})
    assert (status, made["content_size_bytes"]) == (200, 100_000)
    assert api.service.list_memories(store.id).data[0].path == "/ctl.md"


def test_twenty_clients_one_precondition_one_winner(api: Api) -> None:
    s = api.service
    store = s.create_store("Race")
    mem = s.create_memory(store.id, "/race.md", "start")
    before = len(s.list_versions(store.id).data)
    results: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(20)

    def racer(n: int) -> None:
        barrier.wait()
        status, _, _ = call(
            api,
            "POST",
            f"/v1/memory_stores/{store.id}/memories/{mem.id}",
            {
                "content": f"writer {n}",
                "precondition": {"type": "content_sha256", "content_sha256": mem.content_sha256},
            },
        )
        with lock:
            results.append(status)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [409] * 19
    assert len(s.list_versions(store.id).data) == before + 1
    assert s.get_memory(store.id, mem.id).content.startswith("writer ")  # type: ignore[union-attr]


def test_numbers_no_database_integer_holds_are_refused(api: Api) -> None:
    """Found by fuzzing the server from its own /openapi.json: a feed position past a 64-bit
    integer was a 500 (the driver's overflow). Every number a client sends is answered as a
    refusal that names it, and the other kinds of refusal found beside it say what they may."""
    s = api.service
    store = s.create_store("Numbers").id
    session = s.create_session([{"memory_store_id": store}]).id
    huge = 10**26
    for path in (
        f"/mnemofs/v1/memory_stores/{store}/changes?after={huge}",
        f"/mnemofs/v1/memory_stores/{store}/changes?after=-{huge}",
        f"/mnemofs/v1/memory_stores/{store}/changes?after=-1",
        f"/v1/memory_stores/{store}/memories?limit={huge}",
        f"/v1/memory_stores/{store}/memory_versions?limit={huge}",
        f"/v1/sessions?limit={huge}",
    ):
        status, body, _ = call(api, "GET", path)
        assert status == 400, (path, body)
        assert body["error"]["type"] == "invalid_request_error"
    status, body, _ = call(api, "GET", f"/mnemofs/v1/memory_stores/{store}/changes?after=0")
    assert status == 200
    stores_before = [x.id for x in s.list_stores()]
    for path, sent in (
        ("/v1/memory_stores", {"name": "caps", "max_memories": huge}),
        ("/v1/memory_stores", {"name": "caps", "max_content_bytes": huge}),
        (f"/v1/memory_stores/{store}", {"max_memories": huge}),
        ("/mnemofs/v1/pools", {"name": "pool", "max_memories": huge}),
    ):
        status, body, _ = call(api, "POST", path, sent)
        assert status == 400, (path, body)
        assert str(huge) in body["error"]["message"]
    assert [x.id for x in s.list_stores()] == stores_before  # no store made
    assert s.get_store(store).max_memories is None  # nor changed
    status, body, _ = call(api, "GET", f"/mnemofs/v1/sessions/{session}/context?max_words={huge}")
    assert status == 200  # as many words as there are
    # A method no route takes says which ones do (RFC 9110), over every route at that path.
    status, body, headers = call(api, "PUT", f"/v1/memory_stores/{store}")
    assert status == 405
    assert headers["allow"] == "DELETE, GET, HEAD, POST"
    # HEAD is GET's answer without the body (what a load balancer's health check may ask).
    for path, auth in (("/health", None), (f"/v1/memory_stores/{store}", "key")):
        status, body, headers = call(api, "HEAD", path, auth=auth)
        _, whole, _ = call(api, "GET", path, auth=auth)
        assert (status, body) == (200, None)
        assert int(headers["content-length"]) == len(json.dumps(whole, separators=(",", ":")))
    status, body, headers = call(api, "HEAD", "/v1/memory_stores/memstore_nothing")
    assert (status, body, headers["x-should-retry"]) == (404, None, "false")


def test_text_with_nul_is_refused_and_changes_nothing(api: Api) -> None:
    """Also found by the fuzzer: on PostgreSQL a description or instructions holding NUL were
    stored cut at it (libpq sends text parameters as C strings), and an id holding one was a
    503 that clients retry, or, cut at the NUL, named the memory it began with."""
    s = api.service
    store = s.create_store("Nul", "kept as it was").id
    memory = s.create_memory(store, "/kept.md", "kept")
    status, body, _ = call(api, "POST", f"/v1/memory_stores/{store}", {"description": "a\x00b"})
    assert (status, body["error"]["message"]) == (400, "description contains a NUL character at 1")
    status, body, _ = call(api, "POST", "/v1/memory_stores", {"name": "n", "description": "\x00"})
    assert status == 400
    attach = {"type": "memory_store", "memory_store_id": store}
    for sent, word in (
        ({"resources": [{**attach, "instructions": "do\x00this"}]}, "instructions"),
        ({"resources": [attach], "mount_root": "/mnt/a\x00b"}, "mount_root"),
    ):
        status, body, _ = call(api, "POST", "/v1/sessions", sent)
        assert status == 400, body
        assert word in body["error"]["message"]
    assert s.get_store(store).description == "kept as it was"
    base = f"/v1/memory_stores/{store}/memories"
    for method, path in (
        ("DELETE", f"{base}/{memory.id}%00x"),
        ("POST", f"{base}/{memory.id}%00x"),
        ("GET", f"{base}/{memory.id}%00x"),
        ("GET", f"/v1/memory_stores/{store}%00x"),
        ("GET", f"/v1/memory_stores/{store}/memory_versions?memory_id={memory.id}%00x"),
    ):
        sent = {"content": "changed"} if method == "POST" else None
        status, body, headers = call(api, method, path, sent)
        assert status in (400, 404) or (method, status) == ("GET", 200), (method, path, body)
        if status != 200:
            assert headers["x-should-retry"] == "false"
    assert s.get_memory(store, memory.id).content == "kept"  # type: ignore[union-attr]
    assert len(s.list_versions(store).data) == 1


def test_openapi_health_and_logs(api: Api) -> None:
    status, doc, _ = call(api, "GET", "/openapi.json", auth=None)
    assert status == 200
    assert "/v1/memory_stores/{store_id}/memories/{memory_id}" in doc["paths"]
    # Every reference resolves within the document (a client generator or a fuzzer reads
    # them from its root: a body's own "#/$defs/..." did not).
    refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(doc))
    assert refs
    for ref in refs:
        assert ref.startswith("#/"), ref
        node = doc
        for part in ref[2:].split("/"):
            assert part in node, ref
            node = node[part]
    # What a refusal looks like, on every operation: the wire's error body with a 4xx or 5xx,
    # not the framework's 422 (this server answers a body that does not validate with 400).
    error = {"$ref": "#/components/schemas/Error"}
    for operations in doc["paths"].values():
        for operation in operations.values():
            responses = operation["responses"]
            assert "422" not in responses
            for status in ("4XX", "5XX"):
                assert responses[status]["content"]["application/json"]["schema"] == error
    assert doc["components"]["schemas"]["Error"]["required"] == ["type", "error", "request_id"]
    status, health, headers = call(api, "GET", "/health", auth=None)
    assert (status, health) == (200, {"status": "ok"})
    assert headers["request-id"].startswith("req_")
    # No credential ever reaches the log, and every request left one JSON line.
    token = api.service.create_session_token(api.service.create_session([]).id).token
    assert token is not None
    call(api, "GET", "/v1/memory_stores", auth=token)
    text = api.server.log.read_text()
    for line in text.splitlines():
        if line.startswith("{"):
            json.loads(line)
    assert api.key not in text
    assert token not in text
    assert "mnemofs-key-" not in text
    assert "mnemofs-token-" not in text
    access = [r for r in api.server.lines() if r.get("logger") == "mnemofs.http.access"]
    assert access
    assert all("?" not in r["path"] for r in access)


def test_sigterm_lets_requests_in_flight_finish(api: Api, tmp_path: Any) -> None:
    """A request whose body is still arriving when SIGTERM comes is answered and committed;
    then the server exits."""
    store = api.service.create_store("Graceful")
    body = json.dumps({"path": "/late.md", "content": "arrived after SIGTERM"}).encode()
    with serving(api.db_url, tmp_path / "server.log") as server:
        url = urlsplit(server.url)
        sock = socket.create_connection((url.hostname, url.port))
        head = (
            f"POST /v1/memory_stores/{store.id}/memories HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {api.key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head + body[:10])
        time.sleep(0.3)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        sock.sendall(body[10:])
        response = b""
        while b"\r\n\r\n" not in response or not response.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            response += chunk
        sock.close()
        assert response.startswith(b"HTTP/1.1 200"), response[:200]
        # uvicorn exits by the signal it stopped on, once it has shut down cleanly
        assert server.process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert api.service.find_memory(store.id, "/late.md").content == "arrived after SIGTERM"


@pytest.mark.mounted
def test_mount_cli_and_api_see_each_other(api: Api, tmp_path: Any) -> None:
    """One database, three faces: an API write shows in the mount within a second, a save in
    the mount is at once a version the API lists (signed by the session), and the CLI reads
    what the API wrote."""
    from .mounted import mounted, wait_for

    s = api.service
    store = s.create_store("Faces")
    session = s.create_session([{"type": "memory_store", "memory_store_id": store.id}])
    client = api.client()
    with mounted(api.db_url, session.id, tmp_path / "mnt") as daemon:
        where = daemon.root / "faces"
        made = client.beta.memory_stores.memories.create(
            store.id, path="/from-api.md", content="written over HTTP\n"
        )
        assert wait_for(lambda: (where / "from-api.md").exists(), timeout=1.0)
        assert (where / "from-api.md").read_text() == "written over HTTP\n"
        client.beta.memory_stores.memories.update(
            made.id, memory_store_id=store.id, content="changed over HTTP\n"
        )
        assert wait_for(
            lambda: (where / "from-api.md").read_text() == "changed over HTTP\n", timeout=1.0
        )
        (where / "from-mount.md").write_text("saved in the mount\n")
        listed = {m.path: m for m in client.beta.memory_stores.memories.list(store.id)}
        assert set(listed) == {"/from-api.md", "/from-mount.md"}
        versions = client.beta.memory_stores.memory_versions.list(
            store.id, memory_id=listed["/from-mount.md"].id
        )
        assert versions.data[0].created_by is not None
        assert versions.data[0].created_by.type == "session_actor"
    done = subprocess.run(
        [sys.executable, "-m", "mnemofs", "memories", "cat", store.id, "/from-api.md"],
        env={**os.environ, "MNEMOFS_DB": api.db_url},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "changed over HTTP\n"
