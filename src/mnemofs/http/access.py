"""Who may do what: credentials from the request, and the rules of a session token.

- An API key (``Authorization: Bearer`` or ``x-api-key``) is an admin: everything.
- A session token reaches its own session and the stores attached to it, as their access
  allows: a write to a ``read_only`` store is 403; a store not attached is 404 (its existence
  is not told); admin endpoints (stores' lifecycle, redaction, keys, other sessions) are 403.
- No credential, or one that is unknown, revoked or of an ended session: 401.

Checks run before the store is touched, so a refused request changes nothing.
"""

from __future__ import annotations

from starlette.requests import Request

from mnemofs.errors import NotFound
from mnemofs.http.wire import HttpError, forbidden, unauthenticated
from mnemofs.models import Attachment
from mnemofs.store.credentials import Caller
from mnemofs.store.service import MemoryService

MAX_CREDENTIAL_CHARS = 512  # longer is no credential of ours: refused before any hashing


def credential(request: Request) -> str:
    """The secret the request presents, from ``Authorization: Bearer`` or ``x-api-key``."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise unauthenticated("the Authorization header must be 'Bearer <key or token>'")
        secret = value.strip()
    else:
        secret = request.headers.get("x-api-key", "").strip()
        if not secret:
            raise unauthenticated(
                "no credential: send 'Authorization: Bearer <key or token>' or 'x-api-key: <key>'"
            )
    if len(secret) > MAX_CREDENTIAL_CHARS:
        raise unauthenticated("the credential is not valid")
    return secret


def authenticate(service: MemoryService, request: Request) -> Caller:
    """The caller behind the request's credential; 401 when there is none that works."""
    caller = service.authenticate(credential(request))
    if caller is None:
        raise unauthenticated(
            "the credential is not valid: unknown, revoked, or its session has ended"
        )
    request.state.caller = caller.actor  # for the access log: an id, never the secret
    return caller


def caller_of(request: Request) -> Caller:
    """A handler's caller, found by the app's guard before the request's parameters and body
    were read, so a request without a working credential is a 401 whatever else is wrong."""
    caller: Caller = request.state.caller_object
    return caller


def admin_only(caller: Caller, what: str) -> None:
    if not caller.is_admin:
        raise forbidden(f"a session token cannot {what}: that needs an API key")


def attachment(caller: Caller, store_id: str, *, write: bool = False) -> Attachment | None:
    """Check ``caller`` may read (or ``write``) store ``store_id``; its attachment, if any."""
    if caller.session is None:
        return None
    for att in caller.session.resources:
        if att.memory_store_id == store_id:
            if write and att.access != "read_write":
                raise forbidden(
                    f"memory store {store_id} is attached to session {caller.session.id} "
                    "read_only: it cannot be changed through it"
                )
            return att
    raise NotFound(f"memory store {store_id!r} not found")


def own_session(caller: Caller, session_id: str) -> None:
    if caller.session is not None and caller.session.id != session_id:
        raise forbidden("a session token reaches its own session only")


__all__ = ["HttpError", "admin_only", "attachment", "authenticate", "caller_of", "own_session"]
