"""mnemofs's own store-level endpoints for admins (issues 18, 19): export and import
(``/mnemofs/v1/memory_stores/{id}/export``, ``/mnemofs/v1/memory_stores/import``), restore and
fork as of a time.

Files go through an owner-only temporary file on the server, never whole in memory: an
export is written there (in a worker thread: it can take seconds) and then streamed; an
import's body is streamed there, up to ``MAX_IMPORT_BYTES``, and imported from it in one
transaction. The format is ``docs/export-format.md``.
"""

from __future__ import annotations

import os
import tempfile

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.responses import FileResponse, Response

from mnemofs import archive
from mnemofs.http.access import admin_only, caller_of
from mnemofs.http.stores import service
from mnemofs.http.wire import reply, too_large
from mnemofs.store.service import MemoryService

router = APIRouter(prefix="/mnemofs/v1/memory_stores", tags=["export (mnemofs)"])

IMPORT_PATH = "/mnemofs/v1/memory_stores/import"
MAX_IMPORT_BYTES = 8 * 1024 * 1024 * 1024  # 8 GiB: a full store's history, compressed or not
NDJSON = "application/x-ndjson"


@router.get("/{store_id}/export", summary="A store with every version, as one file")
async def export_store(
    request: Request, store_id: str, heads_only: bool = False, gzip: bool = False
) -> Response:
    """JSON Lines (``gzip=true``: gzip-compressed), as ``mnemofs stores export`` writes."""
    admin_only(caller_of(request), "export a memory store")
    s = service(request)
    fd, path = tempfile.mkstemp(prefix="mnemofs-export-", suffix=".jsonl.gz" if gzip else ".jsonl")
    os.close(fd)
    try:
        await run_in_threadpool(_export, s, store_id, path, heads_only)
    except BaseException:
        os.unlink(path)
        raise
    name = f"{store_id}.jsonl" + (".gz" if gzip else "")
    return FileResponse(
        path,
        media_type="application/gzip" if gzip else NDJSON,
        filename=name,
        background=BackgroundTask(os.unlink, path),
    )


def _export(s: MemoryService, store_id: str, path: str, heads_only: bool) -> None:
    with archive.open_for_writing(path) as out:
        archive.write_export(s, store_id, out, heads_only=heads_only)


@router.post("/import", summary="A new store from an export file (the request body)")
async def import_store(
    request: Request, name: str | None = None, keep_ids: bool = False
) -> Response:
    """The body is the file, gzip-compressed or not; the reply the new store."""
    admin_only(caller_of(request), "import a memory store")
    s = service(request)
    fd, path = tempfile.mkstemp(prefix="mnemofs-import-")
    try:
        size = 0
        with os.fdopen(fd, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_IMPORT_BYTES:
                    raise too_large(f"an import is at most {MAX_IMPORT_BYTES} bytes")
                out.write(chunk)
        store = await run_in_threadpool(
            s.import_store, archive.reader(path, "the request body"), name=name, keep_ids=keep_ids
        )
    finally:
        os.unlink(path)
    return reply(store)


@router.post("/{store_id}/restore", summary="The store's memories as they were at a time")
async def restore_store(
    request: Request, store_id: str, at: str, dry_run: bool = False
) -> Response:
    """``mnemofs stores restore``: one transaction; the reply lists the steps taken (or, with
    ``dry_run=true``, the steps it would take)."""
    caller = caller_of(request)
    admin_only(caller, "restore a memory store")
    s = service(request)
    steps = await run_in_threadpool(
        s.restore_store, store_id, at, dry_run=dry_run, actor=caller.actor
    )
    return reply(
        {
            "data": [
                {"action": x.action, "memory_id": x.memory_id, "path": x.path, "was": x.was}
                for x in steps
            ],
            "dry_run": dry_run,
        }
    )


@router.post("/{store_id}/fork", summary="A new store from this one as it was at a time")
async def fork_store(request: Request, store_id: str, at: str, name: str) -> Response:
    caller = caller_of(request)
    admin_only(caller, "fork a memory store")
    s = service(request)
    return reply(await run_in_threadpool(s.fork_store, store_id, at, name=name, actor=caller.actor))
