"""``/v1/sessions`` (create, retrieve, list) and mnemofs's own: a session's tokens and end,
and API keys, under ``/mnemofs/v1`` (``EXTENSIONS``: never a path the seed's API could use)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from mnemofs import limits
from mnemofs.errors import InvalidRequest
from mnemofs.http.access import admin_only, caller_of, own_session
from mnemofs.http.bodies import KeyCreate, SessionCreate
from mnemofs.http.stores import Limit, run, run_search, service
from mnemofs.http.wire import reply

router = APIRouter(tags=["sessions"])


@router.post("/v1/sessions", summary="Create a session with its memory store attachments")
async def create_session(request: Request, body: SessionCreate) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "create a session")
    fields = dict(body.model_extra or {})
    mount_root = fields.pop("mount_root", limits.DEFAULT_MOUNT_ROOT)
    user = fields.pop("user_id", None)
    if not isinstance(mount_root, str) or (user is not None and not isinstance(user, str)):
        raise InvalidRequest("mount_root and user_id must be strings")
    resources = [r.model_dump(exclude_none=True) for r in body.resources]
    return reply(
        await run(
            request, s.create_session, resources, mount_root=mount_root, user=user, fields=fields
        )
    )


@router.get("/v1/sessions/{session_id}", summary="Retrieve a session")
async def retrieve_session(request: Request, session_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    own_session(caller, session_id)
    return reply(await run(request, s.get_session, session_id))


@router.get("/v1/sessions", summary="List sessions, newest first")
async def list_sessions(
    request: Request,
    memory_store_id: str | None = None,
    limit: Limit = limits.DEFAULT_PAGE_LIMIT,
    page: str | None = None,
) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "list sessions")
    return reply(
        await run(
            request, s.list_sessions, memory_store_id=memory_store_id, limit=limit, cursor=page
        )
    )


@router.post(
    "/mnemofs/v1/sessions/{session_id}/tokens", summary="A bearer token for this session only"
)
async def create_token(request: Request, session_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "make session tokens")
    return reply(await run(request, s.create_session_token, session_id))


@router.get(
    "/mnemofs/v1/sessions/{session_id}/search",
    summary="Search every store attached to a session (its own token, or an admin key)",
)
async def search_session(
    request: Request, session_id: str, query: str, limit: Limit = limits.DEFAULT_SEARCH_LIMIT
) -> Response:
    caller = caller_of(request)
    own_session(caller, session_id)
    s = service(request)
    hits = await run_search(request, s.search_session, session_id, query, limit=limit)
    return reply({"data": [h.to_dict() for h in hits]})


@router.post(
    "/mnemofs/v1/sessions/{session_id}/end", summary="End a session: its tokens stop working"
)
async def end_session(request: Request, session_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "end a session")
    return reply(await run(request, s.end_session, session_id))


@router.post(
    "/mnemofs/v1/api_keys",
    summary="Create an admin API key (its secret is shown once)",
    tags=["keys"],
)
async def create_key(request: Request, body: KeyCreate) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "manage API keys")
    return reply(await run(request, s.create_api_key, body.name))


@router.get("/mnemofs/v1/api_keys", summary="List API keys (never their secrets)", tags=["keys"])
async def list_keys(request: Request) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "manage API keys")
    return reply(
        {
            "data": [
                k.to_dict()
                for k in await run(
                    request,
                    s.list_api_keys,
                )
            ],
            "next_page": None,
        }
    )


@router.post("/mnemofs/v1/api_keys/{key_id}/revoke", summary="Revoke an API key", tags=["keys"])
async def revoke_key(request: Request, key_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "manage API keys")
    return reply(await run(request, s.revoke_api_key, key_id))
