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

A connection closed while its client may still be sending (a 413 before the body, a 408, a
431) lingers, as nginx's do: the answer is sent and the sending half shut, and what still comes
is read and thrown away until the client closes, pauses ``LINGER_PAUSE_S`` or ``LINGER_S`` has
passed. Closed at once, the kernel answers those bytes with a reset, which can reach the client
before it has read the answer: Python's ``http.client`` (``urllib``) sending a 30 MiB body got
``ConnectionResetError`` in place of the 413 that said what was wrong.
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
LINGER_S = 10.0  # a closed connection reads what its client still sends at most this long...
LINGER_PAUSE_S = 2.0  # ...and until nothing has come for this long


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
        self._lingering: asyncio.Transport | None = None  # the transport, while it lingers
        self._lingering_until = 0.0  # when lingering ends at the latest
        self._stopping = False  # a graceful stop has begun: its closes do not linger

    # Where a request's reading starts and ends.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._timer = self.loop.call_later(REQUEST_READ_TIMEOUT_S, self._header_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """A graceful stop (uvicorn calls this on every connection): the long polls are
        answered now rather than held to the end of their wait (``revisions``)."""
        self._stopping = True
        super().shutdown()
        release_all()

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None:
            self._last_read = self.loop.time()  # thrown away: the answer has been sent
            return
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

    # Closing while the client may still send (module docstring).

    def _close(self, transport: asyncio.Transport) -> None:
        """Close ``transport``, lingering when the client may still be sending."""
        between = self._in_header and self._header_bytes == 0  # nothing of a request is coming
        if between or self._stopping:
            transport.close()
            return
        self._stop_timer()
        now = self.loop.time()
        self._lingering = transport
        self._lingering_until = now + LINGER_S
        self._last_read = now
        if not transport.can_write_eof():  # pragma: no cover (TCP can)
            transport.close()
            return
        transport.write_eof()  # after what is buffered: the answer
        transport.resume_reading()  # it may have been paused for the app
        self._timer = self.loop.call_later(LINGER_PAUSE_S, self._linger)

    def _linger(self) -> None:
        self._timer = None
        now = self.loop.time()
        due = min(self._last_read + LINGER_PAUSE_S, self._lingering_until)
        if now < due:
            self._timer = self.loop.call_later(due - now, self._linger)
        elif self._lingering is not None:
            self._lingering.close()


class _LingeringTransport:
    """A connection's transport whose ``close`` lingers (``BoundedProtocol._close``); what is
    written while it lingers is dropped (an answer cut short by a refusal). Everything else
    is the transport's own."""

    def __init__(self, transport: asyncio.Transport, protocol: BoundedProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._transport.write(data)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if not self._closing:  # once: the protocol closes it when lingering ends
            self._closing = True
            self._protocol._close(self._transport)
