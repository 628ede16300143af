"""The HTTP face: the seed's API (``API.md``) over ``MemoryService``.

Routes parse, check the caller (``access``), call the store once and shape the reply
(``wire``). One pure-ASGI guard in front of everything gives each request its ``request-id``,
refuses an oversize body before it is read, finds the caller, answers the routes the framework
has nothing to do for itself (``lean``: every change of a remote mount), and writes one JSON
access line (ids only: never a credential, a query string or content).

How the store is called: ``runner``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from mnemofs import limits
from mnemofs.errors import (
    MOVED_HEADER,
    WRITE_AT_ONCE_HEADER,
    MnemofsError,
    Patience,
    Unavailable,
    WriteWouldWait,
)
from mnemofs.http import memories, mounts, pools, sessions, stores, transfer
from mnemofs.http.access import authenticate
from mnemofs.http.bell import Bell
from mnemofs.http.lean import LeanRoutes
from mnemofs.http.revisions import Revisions
from mnemofs.http.runner import store_runner
from mnemofs.http.wire import (
    HttpError,
    Runner,
    document_errors,
    domain_status,
    error_reply,
    reply,
)
from mnemofs.models import new_ulid
from mnemofs.store.service import MemoryService

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

EXTENSIONS = "/mnemofs/v1/"
"""mnemofs's own endpoints live under this prefix, apart from the seed's ``/v1/``."""

# A body holds one content at most, JSON-escaped (a byte may take six: \u0001), plus the rest.
MAX_BODY_BYTES = 6 * limits.MAX_CONTENT_BYTES + limits.MAX_REQUEST_OVERHEAD_BYTES

access_log = logging.getLogger("mnemofs.http.access")
log = logging.getLogger("mnemofs.http")


class Guard:
    """In front of every request: its ``request-id``; the body cap (a declared length over it
    is refused unread, a chunked body is read up to it first); the caller, from the
    credential, before the framework reads any parameter or body (so a request without a
    working credential is a 401 whatever else is wrong with it); one access log line."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self._lean: LeanRoutes | None = None  # made at the first request, every route added

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method == "HEAD":  # GET's answer without its body (RFC 9110; health checks ask so)
            scope = {**scope, "method": "GET"}
            send = _headless(send)
        request_id = f"req_{new_ulid()}"
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers["request-id"] = request_id
                moved = state.get("moved")
                if moved is not None and status < 300:
                    headers[MOVED_HEADER] = " ".join(map(str, moved))
            await send(message)

        try:
            refusal, receive = await self._admit(scope, receive, request_id)
            if refusal is not None:
                await refusal(scope, receive, send_with_id)
            elif (found := self._lean_routes(scope).find(scope)) is not None:
                await self._lean_routes(scope).answer(*found, scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            access_log.info(
                "request",
                extra={
                    "request_id": request_id,
                    "method": method,
                    "path": scope["path"],
                    "status": status,
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                    "caller": state.get("caller"),
                },
            )

    def _lean_routes(self, scope: Scope) -> LeanRoutes:
        if self._lean is None:
            self._lean = LeanRoutes(scope["app"])
        return self._lean

    async def _admit(
        self, scope: Scope, receive: Receive, request_id: str
    ) -> tuple[Response | None, Receive]:
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        # An import's body is a whole store: its route streams it to disk with a cap of its own.
        capped = scope["path"] != transfer.IMPORT_PATH
        if capped and length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _too_large(request_id), receive
        chunked = headers.get(b"transfer-encoding", b"").lower() == b"chunked"
        if capped and length is None and chunked:
            body = bytearray()
            while True:
                message = await receive()
                body += message.get("body", b"")
                if len(body) > MAX_BODY_BYTES:
                    return _too_large(request_id), receive
                if not message.get("more_body", False):
                    break
            receive = _replay(bytes(body), receive)
        if scope["path"].startswith(("/v1/", EXTENSIONS)):
            request = Request(scope)
            try:
                service: MemoryService = scope["app"].state.service
                runner: Runner = scope["app"].state.run
                scope["state"]["caller_object"] = await runner(authenticate, service, request)
            except HttpError as exc:
                return error_reply(exc.status, exc.type, exc.message, request_id), receive
            except MnemofsError as exc:
                if _waits_out(exc, headers, service):
                    return _would_wait(request_id), receive
                code, type_ = domain_status(exc)
                kind = type(exc).__name__
                return error_reply(code, type_, exc.message, request_id, kind=kind), receive
        return None, receive


def _waits_out(exc: MnemofsError, headers: dict[bytes, bytes], service: MemoryService) -> bool:
    """Whether a remote mount's change whose caller could not be read, the database away for
    less than a restart takes, should ask again (``Patience.unreachable``): nothing was done."""
    attempt = headers.get(WRITE_AT_ONCE_HEADER.encode(), b"").decode("latin-1")
    if not isinstance(exc, Unavailable):
        return False
    return isinstance(Patience.unreachable(exc, attempt, service.unreachable_for), WriteWouldWait)


def _headless(send: Send) -> Send:
    async def headless(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return headless


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # what comes after the body: a disconnect

    return replay


def _too_large(request_id: str) -> Response:
    return error_reply(
        413,
        "request_too_large",
        f"the request body is over {MAX_BODY_BYTES} bytes (a memory holds at most "
        f"{limits.MAX_CONTENT_BYTES} bytes of content)",
        request_id,
        headers={"connection": "close"},
    )


def _request_id(request: Request) -> str:
    return str(getattr(request.state, "request_id", "req_unknown"))


async def _on_domain(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MnemofsError)
    status, type_ = domain_status(exc)
    return error_reply(status, type_, exc.message, _request_id(request), kind=type(exc).__name__)


async def _on_would_wait(request: Request, exc: Exception) -> Response:
    return _would_wait(_request_id(request))


def _would_wait(request_id: str) -> Response:
    """A remote mount's change made at once found a lock taken, or the database away for a
    moment: it asks again itself."""
    message = "a lock this change needs is taken, or the database is away: nothing changed"
    return error_reply(503, "overloaded_error", message, request_id, kind="WriteWouldWait")


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return error_reply(exc.status, exc.type, exc.message, _request_id(request))


async def _on_invalid(request: Request, exc: Exception) -> Response:
    """The framework's validation errors, as the wire's 400 (never its default 422 shape).
    Each problem names where and what, never the value sent (it may be large, or a secret)."""
    assert isinstance(exc, RequestValidationError)
    sent_as = _not_json(request)
    if sent_as is not None and any(err.get("loc", ())[:1] == ("body",) for err in exc.errors()):
        # What ``curl -d`` does without ``-H 'content-type: application/json'``: the body
        # was never read as JSON, so what the framework says of it would only mislead.
        message = f"the body must be JSON sent with content-type: application/json, not {sent_as}"
        return error_reply(400, "invalid_request_error", message, _request_id(request))
    problems = []
    for err in exc.errors()[:5]:
        where = ".".join(str(part) for part in err.get("loc", ()))
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    return error_reply(400, "invalid_request_error", "; ".join(problems), _request_id(request))


def _not_json(request: Request) -> str | None:
    """The media type of a body the framework does not read as JSON (it does when the type
    is missing, ``application/json`` or ``application/*+json``), else None."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if not media or media == "application/json":
        return None
    if media.startswith("application/") and media.endswith("+json"):
        return None
    return media[:100]


async def _on_route(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        message = f"no such endpoint: {request.method} {request.url.path}"
        return error_reply(404, "not_found_error", message, _request_id(request))
    if exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        allow = {"Allow": ", ".join(_methods_at(request))}  # RFC 9110 asks for it
        return error_reply(405, "invalid_request_error", message, _request_id(request), allow)
    return error_reply(
        exc.status_code, "invalid_request_error", str(exc.detail), _request_id(request)
    )


def _methods_at(request: Request) -> list[str]:
    """The methods some route takes at the request's path (each method is a route of its
    own, so the one route the router tried names only its own)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "OPTIONS"})
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


async def _on_fault(request: Request, exc: Exception) -> Response:
    log.error("unexpected fault in %s %s", request.method, request.url.path, exc_info=exc)
    return error_reply(500, "api_error", "an internal error occurred", _request_id(request))


def create_app(service: MemoryService, *, connections: int = limits.SERVE_CONNECTIONS) -> FastAPI:
    """The ASGI application over ``service`` (which it closes at shutdown), making at most
    ``connections`` store calls at a time on PostgreSQL."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        bell = Bell(service)  # what wakes the long polls' look (bell.py, revisions.py)
        async with anyio.create_task_group() as tasks:
            look = functools.partial(runner, service.store_states)
            app.state.revisions = Revisions(look, tasks, bell)
            tasks.start_soon(runner.keep)
            yield
            tasks.cancel_scope.cancel()
        bell.close()
        await run_in_threadpool(runner.close)  # the upkeep's last pass ends first
        await run_in_threadpool(service.close)

    app = FastAPI(
        title="mnemofs",
        summary="Durable, versioned memory for AI agents: the memory stores API.",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    runner = store_runner(service, connections)
    app.state.service = service
    app.state.run = runner
    app.state.polls = Counter()  # long polls waiting, by caller (mounts.wait_for_changes)
    for module in (mounts, memories, stores, sessions, transfer, pools):
        # One flat route table (an included router is matched as a level of its own, which
        # cost ~0.1 ms a request here), the busiest routes first: every save of a remote
        # mount, then memories; each route tried before the right one costs ~3 µs.
        app.router.routes.extend(module.router.routes)
    app.add_exception_handler(MnemofsError, _on_domain)
    app.add_exception_handler(WriteWouldWait, _on_would_wait)
    app.add_exception_handler(HttpError, _on_http)
    app.add_exception_handler(RequestValidationError, _on_invalid)
    app.add_exception_handler(StarletteHTTPException, _on_route)
    app.add_exception_handler(Exception, _on_fault)

    @app.get("/health", tags=["health"], summary="Is the server up and its database reachable?")
    def health() -> Response:
        try:
            service.probe()
        except Unavailable as exc:
            return error_reply(503, "overloaded_error", exc.message, "req_health")
        return reply({"status": "ok"})

    made = app.openapi
    app.openapi = lambda: app.openapi_schema or document_errors(made())  # type: ignore[method-assign]
    app.add_middleware(Guard)
    return app
