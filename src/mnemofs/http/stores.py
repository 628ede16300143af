"""``/v1/memory_stores``: create, list, retrieve, update, archive, delete."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from mnemofs import limits
from mnemofs.errors import WRITE_AT_ONCE_HEADER
from mnemofs.http.access import admin_only, attachment, caller_of
from mnemofs.http.bodies import StoreCreate, StoreUpdate
from mnemofs.http.wire import Runner, reply
from mnemofs.models import Deleted
from mnemofs.store.service import MemoryService

T = TypeVar("T")
router = APIRouter(prefix="/v1/memory_stores", tags=["memory stores"])

Limit = Annotated[int, Query(ge=1, le=limits.MAX_PAGE_LIMIT)]


def service(request: Request) -> MemoryService:
    return request.app.state.service  # type: ignore[no-any-return]


async def run(request: Request, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the store the way this backend wants (``runner.store_runner``)."""
    runner: Runner = request.app.state.run
    at_once = request.headers.get(WRITE_AT_ONCE_HEADER)
    if at_once is not None:  # a remote mount's change, which asks again itself
        s = service(request)

        def reporting() -> tuple[T, tuple[str, int, int] | None]:
            s.want_moved()  # this call's writes only, on the thread that makes them
            try:
                made = fn(*args, **kwargs)
            finally:
                moved = s.take_moved()
            return made, moved

        made, moved = await runner.once(at_once, reporting)
        request.state.moved = moved  # the reply says so (app.Guard)
        return made  # type: ignore[no-any-return]
    result: T = await runner(fn, *args, **kwargs)
    return result


async def run_erasure(request: Request, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the store for an erasure (``Runner.erasing``): off the loop on SQLite."""
    runner: Runner = request.app.state.run
    result: T = await runner.erasing(fn, *args, **kwargs)
    return result


async def run_search(request: Request, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the store for a search (``Runner.searching``): off the loop on SQLite."""
    runner: Runner = request.app.state.run
    result: T = await runner.searching(fn, *args, **kwargs)
    return result


@router.post("", summary="Create a memory store")
async def create_store(request: Request, body: StoreCreate) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "create a memory store")
    return reply(
        await run(
            request,
            s.create_store,
            body.name,
            body.description,
            metadata=body.metadata,
            max_memories=body.max_memories,
            max_content_bytes=body.max_content_bytes,
        )
    )


@router.get("", summary="List memory stores")
async def list_stores(
    request: Request,
    include_archived: bool = False,
    created_at_gte: Annotated[datetime | None, Query(alias="created_at[gte]")] = None,
    created_at_lte: Annotated[datetime | None, Query(alias="created_at[lte]")] = None,
    limit: Limit = limits.DEFAULT_PAGE_LIMIT,
    page: str | None = None,
) -> Response:
    """Oldest first; a session token sees only the stores attached to its session."""
    caller = caller_of(request)
    s = service(request)
    only = None
    if caller.session is not None:
        only = [a.memory_store_id for a in caller.session.resources]
    return reply(
        await run(
            request,
            s.list_stores,
            include_archived=include_archived,
            created_at_gte=created_at_gte,
            created_at_lte=created_at_lte,
            limit=limit,
            cursor=page,
            only=only,
        )
    )


@router.get("/{store_id}", summary="Retrieve a memory store")
async def retrieve_store(request: Request, store_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id)
    return reply(await run(request, s.get_store, store_id))


@router.post("/{store_id}", summary="Update a memory store")
async def update_store(request: Request, store_id: str, body: StoreUpdate) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "update a memory store")
    return reply(
        await run(
            request,
            s.update_store,
            store_id,
            name=body.name,
            description=body.description,
            metadata=body.metadata,
            max_memories=body.max_memories,
            max_content_bytes=body.max_content_bytes,
            evict=body.evict,
        )
    )


@router.post("/{store_id}/archive", summary="Archive a memory store (one-way)")
async def archive_store(request: Request, store_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "archive a memory store")
    return reply(await run(request, s.archive_store, store_id))


@router.delete("/{store_id}", summary="Delete a memory store with its memories and versions")
async def delete_store(request: Request, store_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "delete a memory store")
    await run_erasure(request, s.delete_store, store_id)
    return reply(Deleted(store_id, "memory_store_deleted"))
