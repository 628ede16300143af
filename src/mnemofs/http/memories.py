"""``/v1/memory_stores/{store}/memories`` and ``.../memory_versions``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from mnemofs import limits
from mnemofs.http.access import admin_only, attachment, caller_of
from mnemofs.http.bodies import MemoryCreate, MemoryUpdate
from mnemofs.http.stores import Limit, run, run_erasure, service
from mnemofs.http.wire import reply
from mnemofs.models import Deleted, Operation, View

router = APIRouter(prefix="/v1/memory_stores/{store_id}", tags=["memories"])

Depth = Annotated[int | None, Query(description="0 (or omitted): the whole subtree; 1: children")]


@router.post("/memories", summary="Create a memory (never overwrites)")
async def create_memory(
    request: Request, store_id: str, body: MemoryCreate, view: View = "basic"
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id, write=True)
    memory = await run(
        request, s.create_memory, store_id, body.path, body.content or "", actor=caller.actor
    )
    return reply(memory.in_view(view))


@router.get("/memories", summary="List memories under a prefix, in path order")
async def list_memories(
    request: Request,
    store_id: str,
    path_prefix: str = "/",
    depth: Depth = None,
    view: View = "basic",
    limit: Limit = limits.DEFAULT_PAGE_LIMIT,
    page: str | None = None,
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id)
    return reply(
        await run(
            request,
            s.list_memories,
            store_id,
            path_prefix=path_prefix,
            depth=depth,
            view=view,
            limit=limit,
            cursor=page,
        )
    )


@router.get("/memories/{memory_id}", summary="Retrieve a memory")
async def retrieve_memory(
    request: Request, store_id: str, memory_id: str, view: View = "full"
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id)
    return reply((await run(request, s.get_memory, store_id, memory_id)).in_view(view))


@router.post("/memories/{memory_id}", summary="Update a memory's content, path, or both")
async def update_memory(
    request: Request,
    store_id: str,
    memory_id: str,
    body: MemoryUpdate,
    view: View = "basic",
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id, write=True)
    precondition = None if body.precondition is None else body.precondition.model_dump()
    memory = await run(
        request,
        s.update_memory,
        store_id,
        memory_id,
        content=body.content,
        path=body.path,
        precondition=precondition,
        actor=caller.actor,
    )
    return reply(memory.in_view(view))


@router.delete("/memories/{memory_id}", summary="Delete a memory (its versions stay)")
async def delete_memory(
    request: Request,
    store_id: str,
    memory_id: str,
    expected_content_sha256: str | None = None,
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id, write=True)
    await run(
        request,
        s.delete_memory,
        store_id,
        memory_id,
        expected_content_sha256=expected_content_sha256,
        actor=caller.actor,
        archived_ok=True,
    )
    return reply(Deleted(memory_id, "memory_deleted"))


@router.get("/memory_versions", summary="List versions, newest first", tags=["versions"])
async def list_versions(
    request: Request,
    store_id: str,
    memory_id: str | None = None,
    session_id: str | None = None,
    api_key_id: str | None = None,
    operation: Operation | None = None,
    created_at_gte: Annotated[datetime | None, Query(alias="created_at[gte]")] = None,
    created_at_lte: Annotated[datetime | None, Query(alias="created_at[lte]")] = None,
    view: View = "basic",
    limit: Limit = limits.DEFAULT_PAGE_LIMIT,
    page: str | None = None,
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id)
    return reply(
        await run(
            request,
            s.list_versions,
            store_id,
            memory_id=memory_id,
            session_id=session_id,
            api_key_id=api_key_id,
            operation=operation,
            created_at_gte=created_at_gte,
            created_at_lte=created_at_lte,
            view=view,
            limit=limit,
            cursor=page,
        )
    )


@router.get("/memory_versions/{version_id}", summary="Retrieve a version", tags=["versions"])
async def retrieve_version(
    request: Request, store_id: str, version_id: str, view: View = "full"
) -> Response:
    caller = caller_of(request)
    s = service(request)
    attachment(caller, store_id)
    return reply((await run(request, s.get_version, store_id, version_id)).in_view(view))


@router.post(
    "/memory_versions/{version_id}/redact",
    summary="Clear a version's content, keeping who, what and when",
    tags=["versions"],
)
async def redact_version(request: Request, store_id: str, version_id: str) -> Response:
    caller = caller_of(request)
    s = service(request)
    admin_only(caller, "redact a version")
    erased = await run_erasure(request, s.redact_version, store_id, version_id, actor=caller.actor)
    return reply(erased)
