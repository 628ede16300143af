"""The HTTP backend: a mount or sync worker that holds a session token, not the database.

``RemoteBackend`` implements ``mnemofs.backend.Backend`` over ``mnemofs serve``: the seed's API
where it has what is needed, ``/mnemofs/v1`` (``http/mounts.py``) for the rest, over the
connections of ``connections.py``. Standard library only (``http.client``): a sandbox image
carries no HTTP package for it.

- **Threads**: each thread has its own keep-alive connection; one opened more than
  ``IDLE_REOPEN_S`` ago without use, or that the server has closed (a stop, a restart), is
  replaced before a request: a write sent into a closed connection would have an unknown
  outcome.
- **Failures**: a request that cannot reach the server, or whose answer is lost, raises
  ``Unavailable`` and marks the backend down: until ``probe`` (the mount's reconnecting task)
  reaches the server again, calls fail at once. A save whose answer was lost is never reported
  as done. A mount's change not sent (``write_at_once``) is ``WriteWouldWait`` instead for the
  first ``Patience.UNREACHABLE_S`` of the outage: it waits out a restart. A 401 (token
  revoked, session ended) raises ``AccessRevoked`` from then on.
- **Errors** come back as the store raised them (``error.mnemofs_error``), so a remote mount
  gives the errno a local one would; ``WriteWouldWait`` too, for a change the mount asked to
  be made at once (``write_at_once``), so it pauses serving its other requests, as a local one.
- **Changes made elsewhere**: a thread long-polls ``/mnemofs/v1/changes/wait`` and wakes the
  watcher through a pipe (``listen_for_changes``), handing it the states the poll heard. The
  mount's own changes are not read back: each reply says what the change moved (moves.py).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from mnemofs import errors
from mnemofs import remotewire as wire
from mnemofs.connections import Connection, HttpsConnection, PlainConnection
from mnemofs.content import Content
from mnemofs.models import (
    Change,
    HistoryEntry,
    Memory,
    MemoryId,
    MemoryPrefix,
    MemoryVersion,
    PathHistory,
    Session,
    StoreId,
    StoreSnapshot,
    StoreState,
    VersionId,
)
from mnemofs.moves import OwnMoves

log = logging.getLogger("mnemofs.remote")

ENV_SERVER = "MNEMOFS_SERVER"
ENV_TOKEN = "MNEMOFS_TOKEN"
TIMEOUT_S = 30.0  # a request that takes longer is taken for a lost server
IDLE_REOPEN_S = 4.0  # below uvicorn's keep-alive timeout (5 s)
WAIT_S = 20.0  # one long poll
POLL_PACE_S = 0.05  # after a poll that heard news, the next waits this long (as the watcher)
CHANGES_PAGE = 5000  # change feed entries per request
FETCH_IDS = 100  # memories per request when catching up (each up to 100 KB of content)
ACCESS_FLUSH_S = 1.0  # reads noted are sent within this long (a mount's upkeep, ``checkpoint``)
_PREFIX = "/mnemofs/v1"
_ERROR_CLASSES = {
    cls.__name__: cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.MnemofsError)
}


class RemoteBackend:
    """``Backend`` over HTTP (see the module docstring)."""

    reads_along = True  # every read a request (``Backend.reads_along``)

    def __init__(self, server: str, token: str, *, timeout: float = TIMEOUT_S) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise errors.InvalidRequest(f"--server must be an http(s) URL, got {server!r}")
        self.server = f"{url.scheme}://{url.netloc}"
        self._url, self.token = server, token.strip()
        if not self.token.isprintable() or " " in self.token:
            raise errors.InvalidRequest("the session token holds characters no token has")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._base = url.path.rstrip("/")
        self._auth = {"authorization": f"Bearer {token.strip()}"}
        self._timeout = timeout
        self._local = threading.local()
        self._down: str | None = None
        self._down_since = 0.0  # when it could no longer be reached (``Patience.unreachable``)
        self._revoked: str | None = None
        self._fail_fast = False
        self._accessed: dict[str, set[str]] = {}
        self.moves = OwnMoves()  # what its own changes reported (moves.py)
        self._accessed_since = 0.0  # when the first read now noted was
        self._lock = threading.Lock()
        self._session: Session | None = None

    # -- transport ---------------------------------------------------------------------------
    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        used = getattr(self._local, "used", 0.0)
        if conn is not None and (time.monotonic() - used > IDLE_REOPEN_S or conn.closed()):
            conn.close()
            conn = None
        if conn is None:
            if self._https:
                conn = HttpsConnection(self._host, self._port, self._timeout)
            else:
                conn = PlainConnection(self._host, self._port, self._timeout)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | list[tuple[str, Any]] | None = None,
        *,
        probing: bool = False,
        read: bool = False,
    ) -> Any:
        """One request; ``read``: a POST that changes nothing, safe to send again (as a GET)."""
        if self._revoked is not None:
            raise errors.AccessRevoked(self._revoked)
        at_once = getattr(self._local, "at_once", None)
        if method == "GET" or read:
            at_once = None
        if self._down is not None and self._fail_fast and not probing:
            refusal = errors.Unavailable(f"the server is unreachable: {self._down}")
            raise errors.Patience.unreachable(refusal, at_once, self.unreachable_for)
        target = self._base + path
        if query:
            target += "?" + urlencode(query, doseq=True)
        headers = dict(self._auth)
        if at_once is not None:
            self._local.at_once = None  # the first change only, as the store's own
            headers[errors.WRITE_AT_ONCE_HEADER] = at_once
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode()
            headers["content-type"] = "application/json"
        for attempt in (1, 2):
            reused = getattr(self._local, "conn", None) is not None
            try:
                conn = self._connection()  # connecting can fail too: nothing sent then
            except (OSError, http.client.HTTPException) as exc:
                raise self._unreachable(exc, at_once) from None
            try:
                status, connection, payload, moved = conn.exchange(method, target, data, headers)
                break
            except (OSError, http.client.HTTPException) as exc:
                # A kept-alive connection the server had closed: a read is safe to send again.
                # Not one that timed out: a server that did not answer in time (gone, hung, or
                # the network dropping everything) would make the mount wait as long again.
                closed = not isinstance(exc, TimeoutError)
                if attempt == 1 and reused and closed and (method == "GET" or read):
                    self._drop_connection()
                    continue
                raise self._unreachable(exc, None) from None  # sent: maybe made
        self._local.used = time.monotonic()
        if connection == "close":
            self._drop_connection()
        if self._down is not None:
            self._down = None
        if status >= 400:
            raise self._refusal(status, payload)
        if moved:
            self.moves.note(moved)
        return json.loads(payload) if payload else None

    def _unreachable(self, exc: Exception, at_once: str | None) -> Exception:
        """The server is down from now (``exc``, why): ``Unavailable``, or ``WriteWouldWait``
        for a change's request not sent (``at_once``, its try; ``Patience.unreachable``)."""
        self._drop_connection()
        why = f"{self.server}: {type(exc).__name__}: {exc}".rstrip(": ")
        if self._down is None:
            self._down_since = time.monotonic()
        self._down = why
        refusal = errors.Unavailable(
            f"the server is unreachable ({why}); nothing is known to have changed"
        )
        return errors.Patience.unreachable(refusal, at_once, self.unreachable_for)

    def _refusal(self, status: int, payload: bytes) -> Exception:
        try:
            error = json.loads(payload)["error"]
            message, kind = str(error["message"]), error.get("mnemofs_error")
        except (ValueError, KeyError, TypeError):
            message, kind = payload[:200].decode(errors="replace"), None
        if status == 401:
            self._revoked = f"the server refused the token: {message}"
            log.error("%s; every request through this mount now fails (EACCES)", self._revoked)
            return errors.AccessRevoked(self._revoked)
        if kind == "WriteWouldWait" and status == 503:
            return errors.WriteWouldWait(message)
        cls = _ERROR_CLASSES.get(kind or "")
        if cls is not None:
            return cls(message)
        if status == 404:
            return errors.NotFound(message)
        if status == 409:
            return errors.Conflict(message)
        if status == 413:
            return errors.ContentTooLarge(message)
        if status >= 500:
            return errors.Unavailable(f"the server failed ({status}): {message}")
        return errors.InvalidRequest(f"the server refused ({status}): {message}")

    @staticmethod
    def _store(store_id: str) -> str:
        return f"{_PREFIX}/memory_stores/{quote(store_id, safe='')}"

    # -- what there is -------------------------------------------------------------------------
    def own_session(self) -> Session:
        """The token's session."""
        self._session = wire.session(self._call("GET", f"{_PREFIX}/session"))
        return self._session

    def get_session(self, session_id: str) -> Session:
        session = self.own_session()
        if session.id != session_id:
            raise errors.NotFound(f"session {session_id!r} not found")
        return session

    def snapshot(self, store_id: str) -> StoreSnapshot:
        data = self._call("GET", f"{self._store(store_id)}/snapshot")
        return StoreSnapshot(
            store=wire.store_of(data["store"]),
            revision=int(data["revision"]),
            memories=tuple(wire.memory(m) for m in data["memories"]),
            directories=tuple(data["directories"]),
            last_seq=int(data["last_seq"]),
        )

    def store_states(self, store_ids: list[str]) -> dict[StoreId, StoreState]:
        if not store_ids:
            return {}
        data = self._call("GET", f"{_PREFIX}/store_states", query={"store_ids": store_ids})
        return {StoreId(sid): wire.state(sid, st) for sid, st in data.items()}

    def changes(self, store_id: str, after_seq: int, *, limit: int = 1000) -> list[Change]:
        """Up to ``limit`` changes after ``after_seq``, fetched ``CHANGES_PAGE`` at a time."""
        out: list[Change] = []
        while len(out) < limit:
            ask = min(CHANGES_PAGE, limit - len(out))
            query = {"after": out[-1].seq if out else after_seq, "limit": ask}
            data = self._call("GET", f"{self._store(store_id)}/changes", query=query)
            out += [Change(int(c["seq"]), wire.version(c["version"])) for c in data["data"]]
            if len(data["data"]) < ask:
                break
        return out

    def explicit_directories(self, store_id: str) -> list[str]:
        return list(self._call("GET", f"{self._store(store_id)}/directories")["data"])

    def path_history(self, store_id: str, path: str) -> PathHistory:
        data = self._call("GET", f"{self._store(store_id)}/history", query={"path": path})
        return PathHistory(
            versions=tuple(
                HistoryEntry(
                    version_id=VersionId(v["version_id"]),
                    memory_id=MemoryId(v["memory_id"]),
                    operation=v["operation"],
                    created_at=v["created_at"],
                    size_bytes=int(v["size_bytes"]),
                    redacted=bool(v["redacted"]),
                )
                for v in data["versions"]
            ),
            names=tuple(data["names"]),
        )

    def get_version(self, store_id: str, version_id: str) -> MemoryVersion:
        path = f"/v1/memory_stores/{quote(store_id, safe='')}/memory_versions/"
        return wire.version(self._call("GET", path + quote(version_id, safe="")))

    def get_memory(self, store_id: str, memory_id: str, *, count_access: bool = True) -> Memory:
        path = f"{self._store(store_id)}/memories/{quote(memory_id, safe='')}"
        return wire.memory(
            self._call("GET", path, query={"count_access": str(count_access).lower()})
        )

    def get_memories(self, store_id: str, memory_ids: Sequence[str]) -> dict[MemoryId, Memory]:
        wanted = list(dict.fromkeys(memory_ids))
        found: dict[MemoryId, Memory] = {}
        for start in range(0, len(wanted), FETCH_IDS):
            body = {"memory_ids": wanted[start : start + FETCH_IDS]}
            data = self._call("POST", f"{self._store(store_id)}/fetch", body, read=True)
            found.update((m.id, m) for m in map(wire.memory, data["data"]))
        return found

    def find_memory(self, store_id: str, path: str, *, count_access: bool = True) -> Memory:
        query = {"path": path, "count_access": str(count_access).lower()}
        return wire.memory(self._call("GET", f"{self._store(store_id)}/memory_at", query=query))

    def note_access(self, store_id: str, memory_id: str) -> None:
        with self._lock:
            if not self._accessed:
                self._accessed_since = time.monotonic()
            self._accessed.setdefault(store_id, set()).add(memory_id)

    def flush_accesses(self) -> None:
        with self._lock:
            noted, self._accessed = self._accessed, {}
        for store_id, ids in noted.items():
            self._call("POST", f"{self._store(store_id)}/accesses", {"memory_ids": sorted(ids)})

    # -- changes -------------------------------------------------------------------------------
    def save_file(
        self,
        store_id: str,
        path: str,
        content: str | Content,
        *,
        memory_id: str | None = None,
        actor: str | None = None,
    ) -> tuple[Memory, bool]:
        text = content.text if isinstance(content, Content) else content
        body = {"path": path, "content": text, "memory_id": memory_id}
        data = self._call("POST", f"{self._store(store_id)}/saves", body)
        # The server does not send back what it was sent: the memory holds it now.
        return replace(wire.memory(data["memory"]), content=text), bool(data["created"])

    def rename_over(
        self,
        store_id: str,
        source_id: str,
        target_id: str,
        *,
        actor: str | None = None,
        fold: bool = False,
    ) -> Memory:
        body = {"source_id": source_id, "target_id": target_id, "fold": fold}
        return wire.memory(self._call("POST", f"{self._store(store_id)}/rename_over", body))

    def take_back(
        self,
        store_id: str,
        memory_id: str,
        path: str,
        content: str | Content | None,
        *,
        backup_path: str,
        backup_sha256: str,
        source_id: str | None = None,
        fold: bool = False,
        actor: str | None = None,
    ) -> tuple[Memory, Memory]:
        body = {
            "memory_id": memory_id,
            "path": path,
            "content": content.text if isinstance(content, Content) else content,
            "backup_path": backup_path,
            "backup_sha256": backup_sha256,
            "source_id": source_id,
            "fold": fold,
        }
        data = self._call("POST", f"{self._store(store_id)}/take_back", body)
        return wire.memory(data["memory"]), wire.memory(data["backup"])

    def move_directory(self, store_id: str, old: str, new: str, *, actor: str | None = None) -> int:
        body = {"old": old, "new": new}
        return int(self._call("POST", f"{self._store(store_id)}/move_directory", body)["moved"])

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | Content | None = None,
        path: str | None = None,
        precondition: dict[str, str] | str | None = None,
        actor: str | None = None,
        keep_directory: bool = False,
    ) -> Memory:
        text = content.text if isinstance(content, Content) else content
        body: dict[str, Any] = {"content": text, "path": path, "keep_directory": keep_directory}
        if precondition is not None:
            body["precondition"] = wire.precondition(precondition)
        target = f"{self._store(store_id)}/memories/{quote(memory_id, safe='')}/update"
        return wire.memory(self._call("POST", target, body))

    def delete_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_content_sha256: str | None = None,
        actor: str | None = None,
        keep_directory: bool = False,
        archived_ok: bool = False,
    ) -> MemoryVersion:
        target = f"{self._store(store_id)}/memories/{quote(memory_id, safe='')}/delete"
        return wire.version(self._call("POST", target, {"keep_directory": keep_directory}))

    def make_directory(self, store_id: str, path: str) -> MemoryPrefix:
        data = self._call("POST", f"{self._store(store_id)}/directories", {"path": path})
        return MemoryPrefix(data["path"])

    def remove_directory(self, store_id: str, path: str, *, keep_directory: bool = False) -> None:
        body = {"path": path, "keep_directory": keep_directory}
        self._call("POST", f"{self._store(store_id)}/directories/remove", body)

    # -- keeping up and keeping well -------------------------------------------------------------
    def listen_for_changes(self) -> ChangeStream | None:
        session = self._session or self.own_session()
        return ChangeStream(self, [a.memory_store_id for a in session.resources])

    def data_version(self) -> int | None:
        return None

    def own_since(
        self, store_ids: list[str], version: int | None
    ) -> dict[StoreId, tuple[StoreState, int]] | None:
        return None  # a server's database has no data_version to say nobody else wrote

    def own_moves(self, store_id: str, seen: int, now: int) -> int | None:
        return self.moves.since(store_id, seen, now)

    def commit_files(self) -> list[str]:
        return []

    def flush_to_disk(self) -> None:
        """The server's database synced to disk (a mount's ``fsync``). A server older than
        this call has none to make: its commits stay as durable as they were."""
        try:
            self._call("POST", f"{_PREFIX}/sync", read=True)  # safe to send again
        except errors.NotFound:
            log.debug("the server cannot sync its database to disk on request")

    def checkpoint(self, *, force: bool = False) -> None:
        """The reads noted, once due (the server's database is its own to keep)."""
        if self.checkpoint_due():
            self.flush_accesses()

    def checkpoint_due(self) -> bool:
        wait = self.upkeep_in()
        return wait is not None and wait <= 0

    def upkeep_in(self) -> float | None:
        if not self._accessed:
            return None
        return self._accessed_since + ACCESS_FLUSH_S - time.monotonic()

    def defer_checkpoints(self) -> None: ...

    def write_at_once(self, on: bool = True, *, again: bool = False, last: bool = False) -> None:
        """This thread's next change request asks the server to make its first write at once
        (``errors.WRITE_AT_ONCE_HEADER``): a lock taken there comes back ``WriteWouldWait``,
        nothing done, and the mount serves its other requests while it pauses, rather than
        waiting in the request for the lock (an import of a whole store, a restore)."""
        ask = errors.LAST_TRY if last else errors.TRY_AGAIN if again else errors.FIRST_TRY
        self._local.at_once = ask if on else None

    def defer_reconnects(self) -> None:
        self._fail_fast = True

    @property
    def unavailable(self) -> str | None:
        return self._revoked or self._down

    @property
    def unreachable_for(self) -> float | None:
        return None if self._down is None else time.monotonic() - self._down_since

    def probe(self) -> None:
        """Reach the server again (the token too): ``Unavailable`` while it cannot be."""
        self._call("GET", f"{_PREFIX}/session", probing=True)

    def close(self) -> None:
        with contextlib.suppress(errors.MnemofsError):  # the last second of reads is lost
            self.flush_accesses()
        self._drop_connection()


class ChangeStream:
    """A thread that long-polls the server for the stores' revisions and wakes the watcher
    through a pipe (``fileno`` readable; ``drain`` names the stores that moved). A poll
    compares revisions, so the watcher's look after a quiet second (PostgreSQL's notices can
    be lost) would find nothing more: it was a request a second from every idle mount."""

    quiet_look_s = 60.0

    def __init__(self, backend: RemoteBackend, store_ids: list[str]) -> None:
        # Its own backend: the same server and token, its own connection and patience.
        self._poller = RemoteBackend(backend._url, backend.token, timeout=WAIT_S + TIMEOUT_S)
        self._store_ids = store_ids
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._changed: set[str] = set()
        self._heard: dict[StoreId, StoreState] | None = None  # ``heard_states``
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mnemofs-changes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        known: dict[str, int] | None = None
        next_poll = 0.0  # when a poll answered "moved" may be followed by the next
        while not self._stop.is_set():
            try:
                if next_poll > (now := time.monotonic()) and self._stop.wait(next_poll - now):
                    return
                if known is None:
                    states = self._poller.store_states(self._store_ids)
                    known = {str(k): v.revision for k, v in states.items()}
                    self._wake(set(self._store_ids))  # look once: something may have moved
                    continue
                ids = [s for s in self._store_ids if s in known]
                query = {"store_ids": ids, "revisions": [known[s] for s in ids], "wait": WAIT_S}
                data = self._poller._call("GET", f"{_PREFIX}/changes/wait", query=query)
                for sid, state in data["states"].items():
                    known[sid] = int(state["revision"])
                if data["changed"]:
                    heard = {StoreId(s): wire.state(s, st) for s, st in data["states"].items()}
                    if heard.keys() >= set(self._store_ids):
                        with self._lock:
                            self._heard = heard
                    self._wake(set(data["changed"]))
                    # While this mount writes, its own commits answer every poll at once: a
                    # poll right after would make hundreds a second for nothing.
                    next_poll = time.monotonic() + POLL_PACE_S
            except errors.AccessRevoked:
                self._wake(set(self._store_ids))  # its look is refused too: EACCES, logged
                return
            except errors.MnemofsError as exc:
                log.debug("change stream: %s; again shortly", exc)
                known = None
                self._stop.wait(0.5)
            except Exception:  # never seen: the stream goes on (its watcher waits on it)
                log.exception("change stream failed; again shortly")
                known = None
                self._stop.wait(0.5)

    def _wake(self, stores: set[str]) -> None:
        with self._lock:
            self._changed |= stores
        with contextlib.suppress(OSError):  # a full pipe: the watcher has plenty to read
            os.write(self._write, b"x")

    def fileno(self) -> int:
        return self._read

    def heard_states(self) -> dict[StoreId, StoreState] | None:
        """The states of the last poll that heard a store move, once: a look that comes of it
        reads no ``store_states`` of its own (one request fewer every 50 ms while the mount
        writes). Whatever moved after that poll answers the next one, which wakes it again."""
        with self._lock:
            heard, self._heard = self._heard, None
        return heard

    def drain(self) -> set[str]:
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            changed, self._changed = self._changed, set()
        return changed

    def close(self) -> None:
        self._stop.set()
        os.close(self._read)
        os.close(self._write)
