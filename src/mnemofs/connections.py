"""One kept-alive HTTP/1.1 connection to a mnemofs server, for ``remote.RemoteBackend``: the
standard library only (a sandbox image carries no HTTP package for it)."""

from __future__ import annotations

import http.client
import select
import socket
from typing import Protocol

from mnemofs.errors import MOVED_HEADER as MOVED

# A server that has not taken a connection by then is not there (a SYN is sent again at 1, 3
# and 7 s: a lossy link connects within it).
CONNECT_TIMEOUT_S = 10.0
# Nor one whose host has not acknowledged what was sent by then (``TCP_USER_TIMEOUT``): a live
# server's kernel acknowledges at once however busy the server is, so this fails only a host
# gone or a network dropping everything, which a request's own timeout (30 s, for a server
# slow to answer) would have waited out, every request of a mount waiting with it.
UNACKED_TIMEOUT_S = 10.0
# And one silent that long while a request waits for its answer: after KEEPALIVE_IDLE_S without
# a packet the kernel probes every KEEPALIVE_INTERVAL_S, and a probe unacknowledged through
# ``UNACKED_TIMEOUT_S`` ends the connection (Linux lets that timeout govern keepalive too). A
# live server's kernel acknowledges probes however long the server takes to answer. As the
# PostgreSQL connections' keepalives (store/engine.py).
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3


def _opened(sock: socket.socket, timeout: float) -> socket.socket:
    """A connected socket set for requests: ``timeout`` for each answer, ``UNACKED_TIMEOUT_S``
    for what is sent, and keepalive probes for a server that has gone silent meanwhile."""
    sock.settimeout(timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(UNACKED_TIMEOUT_S * 1000))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
    return sock


class Connection(Protocol):
    def exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes, str]:
        """Send one request; its status, its ``connection`` header (lowercase), body and
        ``mnemofs-moved`` header ("" for none: ``errors.MOVED_HEADER``)."""
        ...

    def closed(self) -> bool:
        """Whether the server has closed this connection while it was idle (a graceful stop,
        a restart): a request sent on it would fail after it was sent, its fate unknown."""
        ...

    def close(self) -> None: ...


class PlainConnection:
    """HTTP/1.1 over one kept-alive TCP connection, for plain ``http://``: what http.client
    does, without its general header parser (~0.1 ms of every round trip here). The server
    (uvicorn) always sends ``content-length``; anything else is a broken exchange."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        connected = socket.create_connection((host, port), min(timeout, CONNECT_TIMEOUT_S))
        self._sock = _opened(connected, timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._host = f"host: {host}:{port}\r\n"
        self._buf = bytearray()
        self._idle = select.poll()
        self._idle.register(self._sock, select.POLLIN)

    def exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes, str]:
        head = f"{method} {target} HTTP/1.1\r\n{self._host}"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += f"content-length: {len(body) if body else 0}\r\n\r\n"
        self._sock.sendall(head.encode() + (body or b""))
        end = self._fill_until(b"\r\n\r\n")
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        del self._buf[: end + 4]
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise http.client.BadStatusLine(lines[0][:80]) from None
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "content-length" not in fields:
            raise http.client.HTTPException("a reply without content-length")
        size = int(fields["content-length"])
        while len(self._buf) < size:
            self._recv()
        payload = bytes(self._buf[:size])
        del self._buf[:size]
        return status, fields.get("connection", "").lower(), payload, fields.get(MOVED, "")

    def closed(self) -> bool:
        # Between requests nothing is due: anything to read is the server's close (or a
        # reset, or bytes out of turn), and the connection is done either way. ~1 µs.
        return bool(self._idle.poll(0))

    def _fill_until(self, marker: bytes) -> int:
        while (end := self._buf.find(marker)) < 0:
            self._recv()
        return end

    def _recv(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise http.client.RemoteDisconnected("the server closed the connection")
        self._buf += chunk

    def close(self) -> None:
        self._sock.close()


class HttpsConnection:
    """``https://``: http.client, which does TLS (certificates checked against the system's)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self._conn = http.client.HTTPSConnection(
            host, port, timeout=min(timeout, CONNECT_TIMEOUT_S)
        )
        self._conn.connect()  # the handshake within the connect timeout too
        assert self._conn.sock is not None
        _opened(self._conn.sock, timeout)
        self._conn.timeout = timeout  # should it ever connect again by itself

    def exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes, str]:
        self._conn.request(method, target, body=body, headers=headers)
        response = self._conn.getresponse()
        payload = response.read()
        connection = (response.getheader("connection") or "").lower()
        return response.status, connection, payload, response.getheader(MOVED) or ""

    def closed(self) -> bool:
        return False  # not asked of TLS (its records may come unasked): found when used

    def close(self) -> None:
        self._conn.close()
