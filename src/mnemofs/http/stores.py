"""``/v1/memory_stores``: create, list, retrieve, update, archive, delete."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from mnemofs import limits
from mnemofs.http.access import Authed, admin_only, attachment
from mnemofs.http.bodies import StoreCreate, StoreUpdate
from mnemofs.http.wire import reply
from mnemofs.models import Deleted
from mnemofs.store.service import MemoryService

router = APIRouter(prefix="/v1/memory_stores", tags=["memory stores"])

Limit = Annotated[int, Query(ge=1, le=limits.MAX_PAGE_LIMIT)]


def service(request: Request) -> MemoryService:
    return request.app.state.service  # type: ignore[no-any-return]


@router.post("", summary="Create a memory store")
def create_store(request: Request, caller: Authed, body: StoreCreate) -> Response:
    s = service(request)
    admin_only(caller, "create a memory store")
    return reply(s.create_store(body.name, body.description, metadata=body.metadata))


@router.get("", summary="List memory stores")
def list_stores(
    request: Request,
    caller: Authed,
    include_archived: bool = False,
    created_at_gte: Annotated[datetime | None, Query(alias="created_at[gte]")] = None,
    created_at_lte: Annotated[datetime | None, Query(alias="created_at[lte]")] = None,
    limit: Limit = limits.DEFAULT_PAGE_LIMIT,
    page: str | None = None,
) -> Response:
    """Oldest first; a session token sees only the stores attached to its session."""
    s = service(request)
    only = None
    if caller.session is not None:
        only = [a.memory_store_id for a in caller.session.resources]
    return reply(
        s.list_stores(
            include_archived=include_archived,
            created_at_gte=None if created_at_gte is None else created_at_gte.isoformat(),
            created_at_lte=None if created_at_lte is None else created_at_lte.isoformat(),
            limit=limit,
            cursor=page,
            only=only,
        )
    )


@router.get("/{store_id}", summary="Retrieve a memory store")
def retrieve_store(request: Request, caller: Authed, store_id: str) -> Response:
    s = service(request)
    attachment(caller, store_id)
    return reply(s.get_store(store_id))


@router.post("/{store_id}", summary="Update a memory store")
def update_store(request: Request, caller: Authed, store_id: str, body: StoreUpdate) -> Response:
    s = service(request)
    admin_only(caller, "update a memory store")
    return reply(
        s.update_store(
            store_id, name=body.name, description=body.description, metadata=body.metadata
        )
    )


@router.post("/{store_id}/archive", summary="Archive a memory store (one-way)")
def archive_store(request: Request, caller: Authed, store_id: str) -> Response:
    s = service(request)
    admin_only(caller, "archive a memory store")
    return reply(s.archive_store(store_id))


@router.delete("/{store_id}", summary="Delete a memory store with its memories and versions")
def delete_store(request: Request, caller: Authed, store_id: str) -> Response:
    s = service(request)
    admin_only(caller, "delete a memory store")
    s.delete_store(store_id)
    return reply(Deleted(store_id, "memory_store_deleted"))
