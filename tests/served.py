"""Helpers for tests of the HTTP API: run the real server process, wait for it, always stop it.

The server is ``python -m mnemofs serve`` bound to 127.0.0.1 on a free port, its database named
by ``$MNEMOFS_DB`` (never on the command line); its JSON log lines are kept in a file so tests
can count what reached the server. It is stopped by its own PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def lines(self) -> list[dict[str, Any]]:
        """Every JSON log line so far."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def requests(self, method: str, path: str) -> list[dict[str, Any]]:
        """The access lines of requests to ``method path`` so far."""
        return [
            r
            for r in self.lines()
            if r.get("logger") == "mnemofs.http.access"
            and r.get("method") == method
            and r.get("path") == path
        ]

    def settled_count(self, method: str, path: str, at_least: int, timeout: float = 5.0) -> int:
        """How many requests to ``method path`` the log shows, once it shows ``at_least`` (an
        access line is written just after its response is sent, so it may lag the client)."""
        deadline = time.monotonic() + timeout
        while len(self.requests(method, path)) < at_least and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # and anything still on its way
        return len(self.requests(method, path))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


@contextmanager
def serving(
    db_url: str, log: Path, *, workers: int = 1, args: tuple[str, ...] = ()
) -> Iterator[Server]:
    """The server on ``db_url``, ready (``/health`` answered), stopped afterwards; ``args``:
    more of ``mnemofs serve``'s options."""
    server = start_server(db_url, log, workers=workers, args=args)
    try:
        yield server
    finally:
        server.stop()


def start_server(
    db_url: str,
    log: Path,
    *,
    workers: int = 1,
    port: int | None = None,
    args: tuple[str, ...] = (),
) -> Server:
    """The server on ``db_url``, ready (``/health`` answered); the caller stops it."""
    port = port or free_port()
    env = {**os.environ, "MNEMOFS_DB": db_url}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mnemofs",
                "serve",
                "--port",
                str(port),
                "--workers",
                str(workers),
                *args,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the server did not come up:\n{log.read_text()}")
        time.sleep(0.05)
