"""The wire's envelope: JSON replies, the error body, and which refusal gets which status.

Every error is ``{"type": "error", "error": {"type": T, "message": M}, "request_id": R}``. Every
4xx that a retry cannot fix says ``x-should-retry: false``, so the official SDK (which retries
408, 409, 429 and 5xx) never repeats a write that was refused, nor reports a retried write that
succeeded the first time as a conflict.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from starlette.responses import Response

from mnemofs import errors

JSON = "application/json"


class Runner(Protocol):
    """How a handler calls the store (``runner.store_runner``)."""

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, waiting as long as a lock it needs is taken."""

    async def once(self, attempt: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` made once with its first write at once: ``WriteWouldWait`` if it would
        wait for a lock (its last ``attempt``: ``Unavailable``), for a caller that asks again
        itself."""

    async def erasing(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn``, a call that erases (and may wait for readers after), off the loop."""

    async def searching(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn``, a search (tens of ms on a large store), off the loop."""


class HttpError(Exception):
    """A refusal only the HTTP face makes (credentials, permissions, routes, body size)."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message


def unauthenticated(message: str) -> HttpError:
    return HttpError(401, "authentication_error", message)


def forbidden(message: str) -> HttpError:
    return HttpError(403, "permission_error", message)


def too_large(message: str) -> HttpError:
    return HttpError(413, "request_too_large", message)


# Domain errors, most specific first: (class, status, wire type).
_DOMAIN: tuple[tuple[type[errors.MnemofsError], int, str], ...] = (
    (errors.ContentTooLarge, 413, "request_too_large"),
    (errors.PathConflict, 409, "memory_path_conflict_error"),
    (errors.PreconditionFailed, 409, "memory_precondition_failed_error"),
    (errors.Conflict, 409, "conflict_error"),
    (errors.NotFound, 404, "not_found_error"),
    (errors.Unavailable, 503, "overloaded_error"),
    (errors.MnemofsError, 400, "invalid_request_error"),  # invalid, limits, archived
)


def domain_status(error: errors.MnemofsError) -> tuple[int, str]:
    for cls, status, type_ in _DOMAIN:
        if isinstance(error, cls):
            return status, type_
    return 400, "invalid_request_error"  # pragma: no cover (MnemofsError matches above)


def dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def reply(obj: Any, status: int = 200) -> Response:
    """A resource (``to_dict``) or plain data as a JSON response."""
    data = obj.to_dict() if hasattr(obj, "to_dict") else obj
    return Response(dumps(data), status_code=status, media_type=JSON)


def error_reply(
    status: int,
    type_: str,
    message: str,
    request_id: str,
    headers: dict[str, str] | None = None,
    *,
    kind: str | None = None,
) -> Response:
    """The wire's error body. ``kind`` names mnemofs's own refusal (``InvalidContent``,
    ``StoreFull``...) in ``error.mnemofs_error``, so a remote mount can give the errno a local
    one would; clients of the seed's API ignore the field."""
    error = {"type": type_, "message": message}
    if kind is not None:
        error["mnemofs_error"] = kind
    body = {"type": "error", "error": error, "request_id": request_id}
    response = Response(dumps(body), status_code=status, media_type=JSON, headers=headers)
    if 400 <= status < 500 and status not in (408, 429):
        response.headers["x-should-retry"] = "false"
    return response


_ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["type", "error", "request_id"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string", "description": "invalid_request_error, ..."},
                "message": {"type": "string", "description": "what was wrong, by name"},
                "mnemofs_error": {"type": "string", "description": "mnemofs's own refusal"},
            },
        },
        "request_id": {"type": "string"},
    },
}


def document_errors(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc``, the OpenAPI document the framework made, saying what this server answers
    when it refuses: the error body above with a 4xx or 5xx, never the framework's 422
    (a body or query that does not validate is a 400 here)."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["Error"] = _ERROR_SCHEMA
    body = {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            responses["4XX"] = {"description": "Refused (see the error's type)", "content": body}
            responses["5XX"] = {"description": "Unavailable or failed", "content": body}
    return doc
