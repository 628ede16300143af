"""The HTTP/1.1 protocol ``mnemofs serve`` runs: uvicorn's (httptools), with the bounds it lacks.

uvicorn reads a request's header for as long as a client takes to send it, and however large
it is: a client that opens connections and sends nothing, or half a header, holds each of them
for good (its keep-alive timeout runs only between requests), and one header line of 200 MiB
grew a server from 56 to 320 MB. Here a header must arrive whole within
``REQUEST_READ_TIMEOUT_S`` of the connection opening or of its first byte, and within
``MAX_REQUEST_HEADER_BYTES``; a body may pause no longer than ``REQUEST_READ_TIMEOUT_S``
between reads, and past its first ``REQUEST_READ_TIMEOUT_S`` must come at ``MIN_BODY_RATE``
bytes a second on average (an import's body is a whole store, so there is no deadline for the
whole; a trickle of a byte every few seconds would hold a connection for days). A late
header or body is answered 408, an oversize header 431, in the wire's error shape, and the
connection is closed; a connection that sent nothing is closed without a word. A graceful stop
answers the long polls at once (``shutdown``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mnemofs.http.revisions import release_all
from mnemofs.http.wire import dumps
from mnemofs.limits import MAX_REQUEST_HEADER_BYTES, MIN_BODY_RATE, REQUEST_READ_TIMEOUT_S
from mnemofs.models import new_ulid

log = logging.getLogger("mnemofs.http")

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class BoundedProtocol(HttpToolsProtocol):
    """uvicorn's protocol, reading each request within a time and a size (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_header = True  # the next bytes belong to a request's line or header
        self._header_bytes = 0  # received since that header began
        self._last_read = 0.0  # when the body's last bytes came
        self._body_since = 0.0  # when the body began (or reading it resumed after our pause)
        self._body_bytes = 0  # what came of it since then
        self._timer: asyncio.TimerHandle | None = None

    # Where a request's reading starts and ends.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer = self.loop.call_later(REQUEST_READ_TIMEOUT_S, self._header_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """A graceful stop (uvicorn calls this on every connection): the long polls are
        answered now rather than held to the end of their wait (``revisions``)."""
        super().shutdown()
        release_all()

    def data_received(self, data: bytes) -> None:
        if self._in_header:
            if self._timer is None:  # the first bytes of a request after a response
                self._timer = self.loop.call_later(REQUEST_READ_TIMEOUT_S, self._header_late)
            self._header_bytes += len(data)
        super().data_received(data)
        if (
            self._in_header
            and self._header_bytes > MAX_REQUEST_HEADER_BYTES
            and not self.transport.is_closing()
        ):
            self._refuse(
                431, f"the request line and header are over {MAX_REQUEST_HEADER_BYTES} bytes"
            )

    def on_headers_complete(self) -> None:
        self._in_header = False
        self._stop_timer()
        super().on_headers_complete()
        if any(name in (b"content-length", b"transfer-encoding") for name, _ in self.headers):
            self._last_read = self._body_since = self.loop.time()
            self._body_bytes = 0
            self._timer = self.loop.call_later(REQUEST_READ_TIMEOUT_S, self._body_late)

    def on_body(self, body: bytes) -> None:
        self._last_read = self.loop.time()
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._stop_timer()
        self._in_header = True
        self._header_bytes = 0
        super().on_message_complete()

    # What happens when a request is late or too large.

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_late(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._header_bytes == 0:  # a connection opened and never used, or left idle
            self.transport.close()
            return
        late = f"the request's header did not arrive within {REQUEST_READ_TIMEOUT_S:g} s"
        self._refuse(408, late)

    def _body_late(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self.pipeline or self.flow.read_paused:
            # Not reading: the request waits behind another, or the app has not taken what
            # came. The pause is ours, not the client's: both clocks start again.
            self._last_read = self._body_since = now
            self._body_bytes = 0
        paused = self._last_read + REQUEST_READ_TIMEOUT_S - now
        # Each KiB that came buys a second more: a trickle cannot hold the connection.
        slow = self._body_since + REQUEST_READ_TIMEOUT_S + self._body_bytes / MIN_BODY_RATE - now
        if min(paused, slow) > 0:
            self._timer = self.loop.call_later(min(paused, slow), self._body_late)
            return
        if paused <= 0:
            self._refuse(408, f"the request's body paused for over {REQUEST_READ_TIMEOUT_S:g} s")
        else:
            self._refuse(408, f"the request's body came slower than {MIN_BODY_RATE} bytes a second")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with ``message`` in the wire's error shape (unless a response
        has begun) and close the connection; the request never reaches the app."""
        self._stop_timer()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.warning("closed the connection of %s: %s", client, message, extra={"status": status})
        # The cycle is this request's while its body is read, else the one before it. If the
        # app answered before the body came (a 401, say), or is still writing the answer
        # before this one, nothing more can be said on this connection.
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started
        if answering and (not self._in_header or not cycle.response_complete):
            self.transport.close()
            return
        request_id = f"req_{new_ulid()}"
        error = {"type": "invalid_request_error", "message": message}
        body = dumps({"type": "error", "error": error, "request_id": request_id})
        head = [
            b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
            b"content-type: application/json",
            b"content-length: %d" % len(body),
            b"request-id: " + request_id.encode(),
            b"connection: close",
        ]
        if status != 408:  # the same request again meets the same refusal
            head.append(b"x-should-retry: false")
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()
