"""Routes the guard answers itself (``http/lean.py``): the framework's routes, matched as its
router matches them, answered as its endpoints and exception handlers answer.

Two ways: every route of the real app against the framework's own routing (which route a
request reaches); and requests to every lean route, good and refused, through the real app on a
real database, answered once by the guard and once by the framework, with the same answer.
Then the real server: refusals on the lean routes keep their status, body, ``request-id`` and
access line.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Query, Request
from starlette.responses import Response
from starlette.routing import Match

from mnemofs.http import lean
from mnemofs.http.app import create_app
from mnemofs.store import MemoryService, make_engine

from .served import serving


def _app(tmp_path: Path) -> tuple[Any, MemoryService]:
    service = MemoryService(make_engine(f"sqlite:///{tmp_path / 'lean.db'}"), actor="tests")
    return create_app(service), service


def _scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": ""}


def test_a_request_reaches_the_route_the_framework_would_pick(tmp_path: Path) -> None:
    """For every route, a path it matches (each parameter filled in) and every method: the
    guard answers when the framework's first full match is lean, and never otherwise."""
    app, service = _app(tmp_path)
    try:
        routes = lean.LeanRoutes(app)
        answered = 0
        for route in app.router.routes:
            format_ = getattr(route, "path_format", None)
            if format_ is None:
                continue
            path = format_.replace("{", "").replace("}", "_x")  # {store_id} -> store_id_x
            for method in ("GET", "POST", "DELETE", "HEAD", "PUT"):
                scope = _scope(method, path)
                first = next(
                    (r for r in app.router.routes if r.matches(scope)[0] is Match.FULL), None
                )
                found = routes.find(scope)
                if first is not None and lean._lean(first) is not None:
                    assert found is not None, (method, path)
                    assert found[0] is first, (method, path, found[0].path)
                    assert set(found[1].values()) <= {f"{p}_x" for p in found[1]}
                    answered += 1
                else:
                    assert found is None, (method, path, found and found[0].path)
        assert answered >= 20  # every save, delete, rename and directory change at least
    finally:
        service.close()


def test_what_is_lean() -> None:
    """Only an async endpoint taking the request and str path parameters is lean."""
    app = FastAPI()

    @app.get("/a/{x}")
    async def plain(request: Request, x: str) -> Response:  # lean
        return Response()

    @app.get("/b/{x}")
    async def typed(request: Request, x: int) -> Response:  # the framework converts
        return Response()

    @app.get("/c")
    async def queried(request: Request, q: str = Query("")) -> Response:
        return Response()

    @app.get("/d")
    def synchronous(request: Request) -> Response:  # run on the framework's threads
        return Response()

    @app.get("/e/{x}")
    async def no_request(x: str) -> Response:
        return Response()

    found = {r.path: lean._lean(r) is not None for r in app.router.routes if hasattr(r, "path")}
    assert found["/a/{x}"]
    assert not any(found[p] for p in ("/b/{x}", "/c", "/d", "/e/{x}"))


class Asgi:
    """The real app, called in this process: its lifespan started, each request one call."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self._life: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._said: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self._task = self.loop.create_task(app(scope, self._life.get, self._said.put))
        self._lifespan("startup")

    def _lifespan(self, what: str) -> None:
        self._life.put_nowait({"type": f"lifespan.{what}"})
        said = self.loop.run_until_complete(self._said.get())
        assert said["type"] == f"lifespan.{what}.complete", said

    def close(self) -> None:
        self._lifespan("shutdown")
        self.loop.run_until_complete(self._task)
        self.loop.close()

    def call(
        self, method: str, path: str, token: str, query: str = "", body: bytes = b""
    ) -> tuple[int, dict[str, str], Any]:
        headers = [(b"authorization", f"Bearer {token}".encode())]
        if body:
            headers += [(b"content-type", b"application/json")]
            headers += [(b"content-length", str(len(body)).encode())]
        scope = {
            **_scope(method, path),
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "scheme": "http",
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
        }
        sent: list[dict[str, Any]] = []
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)  # pragma: no cover (nobody waits for a disconnect)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        self.loop.run_until_complete(self.app(scope, receive, send))
        start = sent[0]
        fields = {k.decode(): v.decode() for k, v in start["headers"]}
        payload = b"".join(m.get("body", b"") for m in sent[1:])
        return start["status"], fields, json.loads(payload) if payload else None


@pytest.fixture
def asgi(tmp_path: Path) -> Iterator[tuple[Asgi, MemoryService]]:
    app, service = _app(tmp_path)
    client = Asgi(app)
    try:
        yield client, service
    finally:
        client.close()


def _same(answer: tuple[int, dict[str, str], Any]) -> tuple[Any, ...]:
    """What two answers to one request share: all but ids and times."""
    status, headers, body = answer
    kept = {k: v for k, v in headers.items() if k not in ("request-id", "content-length")}
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k != "request_id"}
    if status == 200:  # made twice: its ids and times differ, its shape does not
        body = sorted(body) if isinstance(body, dict) else type(body).__name__
    return status, kept, body


def test_the_guard_answers_as_the_framework_does(
    asgi: tuple[Asgi, MemoryService], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, service = asgi
    mine = service.create_store("Mine").id
    shown = service.create_store("Shown").id
    hidden = service.create_store("Hidden").id
    session = service.create_session(
        [{"memory_store_id": mine}, {"memory_store_id": shown, "access": "read_only"}]
    )
    token = service.create_session_token(session.id).token
    key = service.create_api_key("tests").key
    assert token is not None
    assert key is not None
    memory = service.create_memory(mine, "/kept.md", "kept")
    base = "/mnemofs/v1/memory_stores"

    def save(store: str, body: object) -> tuple[str, str, str, str, bytes]:
        return ("POST", f"{base}/{store}/saves", token, "", json.dumps(body).encode())

    good = {"path": "/a.md", "content": "a"}
    fetch = {"memory_ids": [memory.id, "mem_nothing"]}
    too_many = {"memory_ids": [memory.id] * 1001}
    requests: list[tuple[str, str, str, str, bytes]] = [
        save(mine, good),
        save(mine, {"path": "/a.md"}),
        save(mine, {"path": "/a.md", "content": 7}),
        ("POST", f"{base}/{mine}/saves", token, "", b"{not json"),
        save(mine, {"path": "no-slash.md", "content": "a"}),
        save(mine, {"path": "/kept.md/under.md", "content": "a"}),
        save(shown, good),
        save(hidden, good),
        save("memstore_nothing", good),
        ("GET", f"{base}/{mine}/saves", token, "", b""),
        ("POST", f"{base}/{mine}/memories/mem_nothing/delete", token, "", b"{}"),
        ("POST", f"{base}/{mine}/memories/{memory.id}/delete", token, "", b"[]"),
        ("GET", "/mnemofs/v1/store_states", token, "", b""),
        ("GET", "/mnemofs/v1/store_states", token, f"store_ids={mine}&store_ids={shown}", b""),
        ("GET", "/mnemofs/v1/store_states", token, f"store_ids={mine}&store_ids={hidden}", b""),
        ("GET", f"{base}/{mine}/changes", token, "limit=0", b""),
        ("GET", f"{base}/{mine}/changes", token, "after=later", b""),
        ("GET", f"{base}/{mine}/changes", token, "after=0&limit=5&limit=100001", b""),
        ("GET", f"{base}/{mine}/changes", token, "after=0&limit=2", b""),
        ("GET", "/mnemofs/v1/changes/wait", token, f"store_ids={mine}", b""),
        ("GET", "/mnemofs/v1/changes/wait", token, f"store_ids={mine}&revisions=x", b""),
        ("GET", "/mnemofs/v1/changes/wait", token, f"store_ids={mine}&revisions=0&wait=99", b""),
        ("GET", "/mnemofs/v1/changes/wait", token, f"store_ids={mine}&revisions=0&wait=0", b""),
        ("GET", f"{base}/{mine}/memories/{memory.id}", token, "count_access=maybe", b""),
        ("GET", f"{base}/{mine}/memories/{memory.id}", token, "count_access=false", b""),
        ("GET", f"{base}/{hidden}/memories/{memory.id}", token, "", b""),
        ("GET", f"{base}/{mine}/memory_at", token, "", b""),
        ("GET", f"{base}/{mine}/memory_at", token, "path=/kept.md", b""),
        ("GET", f"{base}/{mine}/memory_at", token, "path=/nothing.md", b""),
        ("POST", f"{base}/{mine}/fetch", token, "", json.dumps(fetch).encode()),
        ("POST", f"{base}/{hidden}/fetch", token, "", json.dumps(fetch).encode()),
        ("POST", f"{base}/{mine}/fetch", token, "", json.dumps(too_many).encode()),
        ("POST", f"{base}/{mine}/directories", token, "", b'{"path": "/d"}'),
        ("POST", f"{base}/{mine}/directories/remove", token, "", b'{"path": "/none"}'),
        ("GET", f"{base}/{mine}/snapshot", token, "", b""),
        ("GET", "/mnemofs/v1/session", token, "", b""),
        ("GET", "/mnemofs/v1/session", key, "", b""),
        ("GET", f"/v1/memory_stores/{hidden}", token, "", b""),
        ("GET", f"/v1/memory_stores/{hidden}", key, "", b""),
        ("POST", "/mnemofs/v1/api_keys/key_nothing/revoke", token, "", b""),
        ("GET", "/mnemofs/v1/no_such_thing", token, "", b""),
    ]
    answers = []
    for request in requests:
        answers.append(_same(client.call(*request)))
    assert any(a[0] == 200 for a in answers)
    assert any(a[0] == 400 for a in answers)
    monkeypatch.setattr(lean.LeanRoutes, "find", lambda self, scope: None)
    service.delete_memory(mine, service.find_memory(mine, "/a.md").id)
    service.remove_directory(mine, "/d")
    for request, by_guard in zip(requests, answers, strict=True):
        by_framework = _same(client.call(*request))
        assert by_guard == by_framework, request[:2] + request[3:4]


def test_refusals_on_lean_routes_through_the_real_server(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'served.db'}"
    service = MemoryService(make_engine(db_url), actor="tests")
    store = service.create_store("Served").id
    session = service.create_session([{"memory_store_id": store, "access": "read_only"}])
    token = service.create_session_token(session.id).token
    service.close()
    with serving(db_url, tmp_path / "server.log") as server:
        url = f"{server.url}/mnemofs/v1/memory_stores/{store}/saves"

        def post(body: bytes, auth: str | None) -> tuple[int, dict[str, str], Any]:
            headers = {"content-type": "application/json"}
            if auth is not None:
                headers["authorization"] = f"Bearer {auth}"
            request = urllib.request.Request(url, body, headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, dict(response.headers), json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers), json.loads(exc.read())

        good = json.dumps({"path": "/a.md", "content": "a"}).encode()
        status, headers, body = post(good, None)
        assert status == 401
        assert body["error"]["type"] == "authentication_error"
        status, headers, body = post(good, token)
        assert status == 403
        assert body["error"]["type"] == "permission_error"
        assert "read_only" in body["error"]["message"]
        assert headers["x-should-retry"] == "false"
        status, headers, body = post(b'{"path": "/a.md"}', token)
        assert (status, body["error"]["message"]) == (400, "body.content: Field required")
        assert headers["request-id"] == body["request_id"]
        path = f"/mnemofs/v1/memory_stores/{store}/saves"
        assert server.settled_count("POST", path, at_least=3) == 3  # each line after its reply
        lines = server.requests("POST", path)
        assert [line["status"] for line in lines] == [401, 403, 400]
        assert lines[-1]["request_id"] == body["request_id"]
        assert lines[-1]["caller"] == session.id


# What the framework said of these queries when it read them (FastAPI's Query parameters, up
# to 787f8d0): the endpoints read their queries by hand now, with the same words.
_QUERY_REFUSALS = [
    ("/mnemofs/v1/store_states", "", "query.store_ids: Field required"),
    ("{base}/changes", "limit=0", "query.limit: Input should be greater than or equal to 1"),
    (
        "{base}/changes",
        "after=later",
        "query.after: Input should be a valid integer, unable to parse string as an integer",
    ),
    (
        "{base}/changes",
        "limit=5&limit=100001",  # the last of a repeated parameter counts
        "query.limit: Input should be less than or equal to 100000",
    ),
    (
        "/mnemofs/v1/changes/wait",
        "",
        "query.store_ids: Field required; query.revisions: Field required",
    ),
    (
        "/mnemofs/v1/changes/wait",
        "store_ids={store}&revisions=x",
        "query.revisions.0: Input should be a valid integer, unable to parse string as an integer",
    ),
    (
        "/mnemofs/v1/changes/wait",
        "store_ids={store}&revisions=0&wait=99",
        "query.wait: Input should be less than or equal to 25",
    ),
    (
        "{base}/memory_at",
        "path=/kept.md&count_access=maybe",
        "query.count_access: Input should be a valid boolean, unable to interpret input",
    ),
    ("{base}/memory_at", "count_access=false", "query.path: Field required"),
]


@pytest.mark.parametrize(("path", "query", "message"), _QUERY_REFUSALS)
def test_queries_are_refused_in_the_framework_s_words(
    asgi: tuple[Asgi, MemoryService], path: str, query: str, message: str
) -> None:
    client, service = asgi
    store = service.create_store("Mine").id
    token = service.create_session_token(
        service.create_session([{"memory_store_id": store}]).id
    ).token
    assert token is not None
    base = f"/mnemofs/v1/memory_stores/{store}"
    status, headers, body = client.call(
        "GET", path.format(base=base), token, query.format(store=store)
    )
    assert (status, body["error"]["type"]) == (400, "invalid_request_error")
    assert body["error"]["message"] == message
    assert headers["x-should-retry"] == "false"


def test_the_first_full_match_decides() -> None:
    """A route the framework tries first keeps its requests, though a lean one matches too;
    a partial match (another method) does not stop the search."""
    app = FastAPI()

    @app.get("/x/special")
    async def special(request: Request, q: str = Query("")) -> Response:
        return Response()

    @app.post("/x/posted")
    async def posted(request: Request) -> Response:
        return Response()

    @app.get("/x/{name}")
    async def named(request: Request, name: str) -> Response:
        return Response()

    routes = lean.LeanRoutes(app)
    assert routes.find(_scope("GET", "/x/special")) is None
    found = routes.find(_scope("GET", "/x/posted"))
    assert found is not None
    assert (found[0].path, found[1]) == ("/x/{name}", {"name": "posted"})
    assert routes.find(_scope("DELETE", "/x/posted")) is None
