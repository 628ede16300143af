"""``/mnemofs/v1``: what a remote mount or sync worker needs beyond the seed's API (see
``mnemofs.remote``, the client): its session, store snapshots, the change feed and a long poll
on it, whole-file saves, renames over a target, directory moves and explicit directories.

Scoped like everything else: a session token reaches the stores attached to its session, and
writes only the ``read_write`` ones; the actor of every write is the caller, never a field of
the request.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Annotated, Any, TypeVar, get_origin

import anyio
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response

from mnemofs.http.access import attachment, caller_of
from mnemofs.http.bodies import Precondition
from mnemofs.http.revisions import Revisions
from mnemofs.http.stores import run, service
from mnemofs.http.wire import HttpError, reply
from mnemofs.limits import LONG_POLLS_PER_CALLER

router = APIRouter(prefix="/mnemofs/v1", tags=["mounts (mnemofs)"])

WAIT_MAX_S = 25.0  # a long poll answers by then even if nothing changed
FETCH_MAX = 1000  # memories one fetch may name
CLIENT_GONE = 499  # what the access log says of a poll whose client went away (nginx's)


class Save(BaseModel):
    path: str
    content: str
    memory_id: str | None = None


class RenameOver(BaseModel):
    source_id: str
    target_id: str
    fold: bool = False


class TakeBack(BaseModel):
    memory_id: str
    path: str
    content: str | None = None
    backup_path: str
    backup_sha256: str
    source_id: str | None = None
    fold: bool = False


class MoveDirectory(BaseModel):
    old: str
    new: str


class Update(BaseModel):
    content: str | None = None
    path: str | None = None
    keep_directory: bool = False
    precondition: Precondition | None = None


class Delete(BaseModel):
    keep_directory: bool = False


class Directory(BaseModel):
    path: str


class RemoveDirectory(Directory):
    keep_directory: bool = False


class Accesses(BaseModel):
    memory_ids: list[str]


class Fetch(BaseModel):
    memory_ids: Annotated[list[str], Field(max_length=FETCH_MAX)]


class StoresQuery(BaseModel):
    store_ids: list[str]


class WaitQuery(BaseModel):
    store_ids: list[str]
    revisions: list[int]
    wait: Annotated[float, Field(ge=0, le=WAIT_MAX_S)] = WAIT_MAX_S


class ChangesQuery(BaseModel):
    after: int = 0
    limit: Annotated[int, Field(ge=1, le=100_000)] = 1000


class MemoryQuery(BaseModel):
    count_access: bool = True


class PathQuery(BaseModel):
    path: str
    count_access: bool = True


M = TypeVar("M", bound=BaseModel)


async def _body(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model``. Read by hand rather than declared as a parameter:
    these endpoints carry every save of a remote mount, and the framework's parameter
    machinery cost more than the save itself (see docs/decisions.md). So the guard answers
    them itself (``http/lean.py``)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_input=False)]
        ) from None


def _query(request: Request, model: type[M]) -> M:
    """The request's query parameters as ``model``, read by hand as ``_body`` reads a body,
    with the framework's rules: a list field takes every value given, any other the last."""
    given = request.query_params
    data: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if name in given:
            is_list = get_origin(field.annotation) is list
            data[name] = given.getlist(name) if is_list else given.getlist(name)[-1]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_input=False)]
        ) from None


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with the models it uses written in place: pydantic refers to
    them as ``#/$defs/...``, which a reader of the OpenAPI document resolves from its root,
    where they are not (none of these models refers to itself)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inlined(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inlined(defs[ref.removeprefix("#/$defs/")])
            return {key: inlined(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inlined(item) for item in node]
        return node

    return dict(inlined(schema))


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` that documents ``model`` as the request body."""
    content = {"application/json": {"schema": _schema(model)}}
    return {"requestBody": {"required": True, "content": content}}


def _documented_query(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` that documents ``model``'s fields as query parameters."""
    schema = _schema(model)
    required = set(schema.get("required", ()))
    return {
        "parameters": [
            {"name": name, "in": "query", "required": name in required, "schema": field}
            for name, field in schema["properties"].items()
        ]
    }


def _own_session(request: Request) -> Any:
    caller = caller_of(request)
    if caller.session is None:
        raise HttpError(400, "invalid_request_error", "an API key has no session: use a token")
    return caller.session


@router.get("/session", summary="The caller's own session (a session token's)")
async def own_session(request: Request) -> Response:
    session = _own_session(request)
    return reply(await run(request, service(request).get_session, session.id))


@router.post("/sync", summary="fsync: every change committed so far synced to disk")
async def flush_to_disk(request: Request) -> Response:
    """A remote mount's ``fsync``: its save was committed before it was answered, but SQLite
    syncs its log to disk only at checkpoints. On a worker thread: a disk flush may take
    milliseconds, and it reads nothing a caller could not."""
    await anyio.to_thread.run_sync(service(request).flush_to_disk)
    return reply({"synced": True})


@router.get("/memory_stores/{store_id}/snapshot", summary="A store's whole tree, no content")
async def snapshot(request: Request, store_id: str) -> Response:
    attachment(caller_of(request), store_id)
    snap = await run(request, service(request).snapshot, store_id)
    return reply(
        {
            "store": snap.store.to_dict(),
            "revision": snap.revision,
            "memories": [m.to_dict() for m in snap.memories],
            "directories": list(snap.directories),
            "last_seq": snap.last_seq,
        }
    )


@router.get(
    "/store_states",
    summary="Revision and state of each store",
    openapi_extra=_documented_query(StoresQuery),
)
async def store_states(request: Request) -> Response:
    store_ids = _query(request, StoresQuery).store_ids
    caller = caller_of(request)
    for store_id in store_ids:
        attachment(caller, store_id)
    states = await run(request, service(request).store_states, store_ids)
    return reply({sid: _state(st) for sid, st in states.items()})


def _state(state: Any) -> dict[str, Any]:
    return {
        "revision": state.revision,
        "archived_at": state.archived_at,
        "memory_count": state.memory_count,
    }


@router.get(
    "/changes/wait",
    summary="Long poll: answer once a store's revision moves",
    openapi_extra=_documented_query(WaitQuery),
)
async def wait_for_changes(request: Request) -> Response:
    """The stores (of those given) whose revision is no longer the one given; waits up to
    ``wait`` seconds for one to move. Every server on the database sees every commit, so a
    change through any server reaches a watcher on any other."""
    query = _query(request, WaitQuery)
    store_ids, revisions, wait = query.store_ids, query.revisions, query.wait
    caller = caller_of(request)
    if len(store_ids) != len(revisions):
        raise HttpError(400, "invalid_request_error", "give one revision per store id")
    for store_id in store_ids:
        attachment(caller, store_id)
    # Each poll holds a connection (a descriptor) for up to WAIT_MAX_S: a caller that opened
    # them without end would leave none for anyone else.
    polls: Counter[str] = request.app.state.polls
    if polls[caller.actor] >= LONG_POLLS_PER_CALLER:
        raise HttpError(
            429,
            "rate_limit_error",
            f"{caller.actor} already waits in {LONG_POLLS_PER_CALLER} long polls here, the most "
            "one caller may: ask again once one is answered",
        )
    polls[caller.actor] += 1
    try:
        return await _wait(request, store_ids, revisions, wait)
    finally:
        polls[caller.actor] -= 1
        if not polls[caller.actor]:
            del polls[caller.actor]


async def _wait(
    request: Request, store_ids: list[str], revisions: list[int], wait: float
) -> Response:
    known = dict(zip(store_ids, revisions, strict=True))
    watch: Revisions = request.app.state.revisions
    answers: list[tuple[list[str], dict[Any, Any]]] = []
    failed: list[Exception] = []
    async with anyio.create_task_group() as tasks:

        async def poll() -> None:
            try:
                answers.append(await watch.wait(known, wait))
            except Exception as exc:  # raised below as itself, not in a group
                failed.append(exc)
            tasks.cancel_scope.cancel()

        tasks.start_soon(poll)
        await _until_gone(request)  # cancelled once the poll is answered
        tasks.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not answers:  # the client went away: nobody to answer (status 499 in the access log)
        return Response(status_code=CLIENT_GONE)
    moved, states = answers[0]
    return reply({"changed": moved, "states": {k: _state(v) for k, v in states.items()}})


async def _until_gone(request: Request) -> None:
    """Return once the client has closed its connection. A poll's client that went away
    (a mount killed, a sandbox stopped) used to hold its poll to the end of its wait, and a
    graceful stop of the server with it."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.get(
    "/memory_stores/{store_id}/changes",
    summary="The change feed after a position",
    openapi_extra=_documented_query(ChangesQuery),
)
async def changes(request: Request, store_id: str) -> Response:
    query = _query(request, ChangesQuery)
    attachment(caller_of(request), store_id)
    found = await run(request, service(request).changes, store_id, query.after, limit=query.limit)
    return reply({"data": [{"seq": c.seq, "version": c.version.to_dict()} for c in found]})


@router.get("/memory_stores/{store_id}/directories", summary="Explicit (mkdir) directories")
async def directories(request: Request, store_id: str) -> Response:
    attachment(caller_of(request), store_id)
    return reply({"data": await run(request, service(request).explicit_directories, store_id)})


@router.get("/memory_stores/{store_id}/history", summary="What was ever at a path (.history)")
async def path_history(request: Request, store_id: str, path: str) -> Response:
    attachment(caller_of(request), store_id)
    found = await run(request, service(request).path_history, store_id, path)
    return reply(
        {
            "versions": [dataclasses.asdict(v) for v in found.versions],
            "names": list(found.names),
        }
    )


@router.post(
    "/memory_stores/{store_id}/directories", summary="mkdir", openapi_extra=_documented(Directory)
)
async def make_directory(request: Request, store_id: str) -> Response:
    body = await _body(request, Directory)
    attachment(caller_of(request), store_id, write=True)
    return reply(await run(request, service(request).make_directory, store_id, body.path))


@router.post(
    "/memory_stores/{store_id}/directories/remove",
    summary="rmdir",
    openapi_extra=_documented(RemoveDirectory),
)
async def remove_directory(request: Request, store_id: str) -> Response:
    body = await _body(request, RemoveDirectory)
    attachment(caller_of(request), store_id, write=True)
    keep = body.keep_directory
    await run(request, service(request).remove_directory, store_id, body.path, keep_directory=keep)
    return reply({"removed": body.path})


@router.get(
    "/memory_stores/{store_id}/memories/{memory_id}",
    summary="A memory, full",
    openapi_extra=_documented_query(MemoryQuery),
)
async def get_memory(request: Request, store_id: str, memory_id: str) -> Response:
    count = _query(request, MemoryQuery).count_access
    attachment(caller_of(request), store_id)
    s = service(request)
    return reply(await run(request, s.get_memory, store_id, memory_id, count_access=count))


@router.post(
    "/memory_stores/{store_id}/fetch",
    summary="Memories by id, full: a catch-up's reads in one request (no access counted)",
    openapi_extra=_documented(Fetch),
)
async def fetch_memories(request: Request, store_id: str) -> Response:
    body = await _body(request, Fetch)
    attachment(caller_of(request), store_id)
    found = await run(request, service(request).get_memories, store_id, body.memory_ids)
    return reply({"data": [m.to_dict() for m in found.values()]})


@router.get(
    "/memory_stores/{store_id}/memory_at",
    summary="The memory at a path, full",
    openapi_extra=_documented_query(PathQuery),
)
async def find_memory(request: Request, store_id: str) -> Response:
    query = _query(request, PathQuery)
    attachment(caller_of(request), store_id)
    s = service(request)
    found = await run(request, s.find_memory, store_id, query.path, count_access=query.count_access)
    return reply(found)


@router.post(
    "/memory_stores/{store_id}/accesses",
    summary="Reads to count (for evict-lru)",
    openapi_extra=_documented(Accesses),
)
async def accesses(request: Request, store_id: str) -> Response:
    body = await _body(request, Accesses)
    attachment(caller_of(request), store_id)
    s = service(request)
    for memory_id in body.memory_ids:
        s.note_access(store_id, memory_id)  # buffered in memory: no database call here
    return reply({"noted": len(body.memory_ids)})


@router.post(
    "/memory_stores/{store_id}/saves",
    summary="A file's whole content as one version",
    openapi_extra=_documented(Save),
)
async def save_file(request: Request, store_id: str) -> Response:
    body = await _body(request, Save)
    caller = caller_of(request)
    attachment(caller, store_id, write=True)
    memory, created = await run(
        request,
        service(request).save_file,
        store_id,
        body.path,
        body.content,
        memory_id=body.memory_id,
        actor=caller.actor,
    )
    # Without its content: the client has it (it just sent it), and a file's content twice
    # more in JSON (encoded here, decoded there) was ~5% of a 4 KiB save's round trip.
    shown = dataclasses.replace(memory, content=None)
    return reply({"memory": shown.to_dict(), "created": created})


@router.post(
    "/memory_stores/{store_id}/rename_over",
    summary="rename onto an existing file",
    openapi_extra=_documented(RenameOver),
)
async def rename_over(request: Request, store_id: str) -> Response:
    body = await _body(request, RenameOver)
    caller = caller_of(request)
    attachment(caller, store_id, write=True)
    memory = await run(
        request,
        service(request).rename_over,
        store_id,
        body.source_id,
        body.target_id,
        actor=caller.actor,
        fold=body.fold,
    )
    return reply(memory)


@router.post(
    "/memory_stores/{store_id}/take_back",
    summary="A save that kept a backup (sed -i.bak): the path keeps its memory",
    openapi_extra=_documented(TakeBack),
)
async def take_back(request: Request, store_id: str) -> Response:
    body = await _body(request, TakeBack)
    caller = caller_of(request)
    attachment(caller, store_id, write=True)
    memory, backup = await run(
        request,
        service(request).take_back,
        store_id,
        body.memory_id,
        body.path,
        body.content,
        backup_path=body.backup_path,
        backup_sha256=body.backup_sha256,
        source_id=body.source_id,
        fold=body.fold,
        actor=caller.actor,
    )
    return reply({"memory": memory.to_dict(), "backup": backup.to_dict()})


@router.post(
    "/memory_stores/{store_id}/move_directory",
    summary="Move a directory whole",
    openapi_extra=_documented(MoveDirectory),
)
async def move_directory(request: Request, store_id: str) -> Response:
    body = await _body(request, MoveDirectory)
    caller = caller_of(request)
    attachment(caller, store_id, write=True)
    moved = await run(
        request, service(request).move_directory, store_id, body.old, body.new, actor=caller.actor
    )
    return reply({"moved": moved})


@router.post(
    "/memory_stores/{store_id}/memories/{memory_id}/update",
    summary="Update, as a mount",
    openapi_extra=_documented(Update),
)
async def update_memory(request: Request, store_id: str, memory_id: str) -> Response:
    body = await _body(request, Update)
    caller = caller_of(request)
    attachment(caller, store_id, write=True)
    memory = await run(
        request,
        service(request).update_memory,
        store_id,
        memory_id,
        content=body.content,
        path=body.path,
        precondition=None if body.precondition is None else body.precondition.model_dump(),
        actor=caller.actor,
        keep_directory=body.keep_directory,
    )
    return reply(memory)


@router.post(
    "/memory_stores/{store_id}/memories/{memory_id}/delete",
    summary="Delete, as a mount",
    openapi_extra=_documented(Delete),
)
async def delete_memory(request: Request, store_id: str, memory_id: str) -> Response:
    body = await _body(request, Delete)
    caller = caller_of(request)
    attachment(caller, store_id, write=True)
    version = await run(
        request,
        service(request).delete_memory,
        store_id,
        memory_id,
        actor=caller.actor,
        keep_directory=body.keep_directory,
    )
    return reply(version)
