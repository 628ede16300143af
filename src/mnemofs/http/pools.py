"""mnemofs's own endpoints for seed 001 (issue 20): capacity pools for admins, and recall
(search, the context renderer) scoped like everything else, under ``/mnemofs/v1``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from mnemofs import limits
from mnemofs.http.access import admin_only, attachment, caller_of, own_session
from mnemofs.http.bodies import PoolCreate, PoolStores
from mnemofs.http.stores import Limit, run, run_search, service
from mnemofs.http.wire import reply

router = APIRouter(prefix="/mnemofs/v1", tags=["pools and recall (mnemofs)"])


@router.post("/pools", summary="Create a capacity pool")
async def create_pool(request: Request, body: PoolCreate) -> Response:
    admin_only(caller_of(request), "create a capacity pool")
    s = service(request)
    return reply(
        await run(request, s.create_pool, body.name, body.max_memories, on_full=body.on_full)
    )


@router.get("/pools", summary="List capacity pools")
async def list_pools(request: Request) -> Response:
    admin_only(caller_of(request), "list capacity pools")
    pools = await run(request, service(request).list_pools)
    return reply({"data": [p.to_dict() for p in pools]})


@router.get("/pools/{pool_id}", summary="Retrieve a capacity pool")
async def get_pool(request: Request, pool_id: str) -> Response:
    admin_only(caller_of(request), "read a capacity pool")
    return reply(await run(request, service(request).get_pool, pool_id))


@router.post("/pools/{pool_id}/stores", summary="Put stores in a capacity pool")
async def add_stores(request: Request, pool_id: str, body: PoolStores) -> Response:
    admin_only(caller_of(request), "change a capacity pool")
    return reply(await run(request, service(request).set_pool, body.memory_store_ids, pool_id))


@router.get("/pools/{pool_id}/search", summary="Search a pool's stores, by end user if asked")
async def search_pool(
    request: Request,
    pool_id: str,
    query: str,
    user_id: str | None = None,
    limit: Limit = limits.DEFAULT_SEARCH_LIMIT,
) -> Response:
    admin_only(caller_of(request), "search a capacity pool")
    s = service(request)
    hits = await run_search(request, s.search_pool, pool_id, query, user=user_id, limit=limit)
    return reply({"data": [h.to_dict() for h in hits]})


@router.get("/memory_stores/{store_id}/search", summary="Search one store's live memories")
async def search_store(
    request: Request, store_id: str, query: str, limit: Limit = limits.DEFAULT_SEARCH_LIMIT
) -> Response:
    attachment(caller_of(request), store_id)  # a token: its own session's stores only
    hits = await run_search(request, service(request).search, store_id, query, limit=limit)
    return reply({"data": [h.to_dict() for h in hits]})


@router.get("/sessions/{session_id}/context", summary="The text to inject into a turn")
async def context(
    request: Request, session_id: str, max_words: int = limits.DEFAULT_CONTEXT_WORDS
) -> Response:
    own_session(caller_of(request), session_id)
    text = await run(request, service(request).context, session_id, max_words=max_words)
    return reply({"session_id": session_id, "context": text})
