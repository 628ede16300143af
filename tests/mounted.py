"""Helpers for tests that mount a real filesystem: start the daemon, wait, always clean up.

FUSE must be there: without ``/dev/fuse`` or ``fusermount3`` these tests fail, unless a
developer opts out with ``MNEMOFS_SKIP_FUSE=1``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mnemofs.store import MemoryService, make_engine

from .served import Server, start_server

SKIP_FUSE_ENV = "MNEMOFS_SKIP_FUSE"
READY_TIMEOUT_S = 30.0

# How ``mounted`` reaches the stores: "local" (the daemon opens the database) or "remote" (a
# `mnemofs serve` on that database, the daemon holding only a session token). The
# ``mount_via`` fixture (conftest.py) sets it for the tests it parametrises.
VIA = "local"
_servers: dict[str, tuple[Server, int]] = {}  # db url -> its server and the mounts using it


@contextmanager
def remote_server(db_url: str, log_dir: Path) -> Iterator[Server]:
    """The server of ``db_url`` for remote mounts: started by the first mount that needs it,
    stopped when the last one using it is done."""
    server, users = _servers.get(db_url, (None, 0))
    if server is None or server.process.poll() is not None:
        server, users = start_server(db_url, log_dir / f"server-{os.getpid()}.log"), 0
    _servers[db_url] = (server, users + 1)
    try:
        yield server
    finally:
        server, users = _servers[db_url]
        if users == 1:
            del _servers[db_url]
            server.stop()
        else:
            _servers[db_url] = (server, users - 1)


def token_for(db_url: str, session_id: str) -> str:
    engine = make_engine(db_url, check_schema=False)
    service = MemoryService(engine, actor="tests")
    try:
        token = service.create_session_token(session_id).token
    finally:
        service.close()
        engine.dispose()
    assert token is not None
    return token


def require_fuse() -> None:
    missing = [
        what
        for what, ok in (
            ("/dev/fuse", os.path.exists("/dev/fuse")),
            ("fusermount3", shutil.which("fusermount3") is not None),
        )
        if not ok
    ]
    if not missing:
        return
    if os.environ.get(SKIP_FUSE_ENV) == "1":
        pytest.skip(f"FUSE tests skipped ({SKIP_FUSE_ENV}=1)")
    pytest.fail(
        f"FUSE is not usable here ({', '.join(missing)} missing); "
        f"set {SKIP_FUSE_ENV}=1 to skip these tests on purpose"
    )


@dataclass
class Daemon:
    process: subprocess.Popen[str]
    root: Path
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=timeout)


@contextmanager
def remote_mount(server_url: str, token: str, root: Path, *extra: str) -> Iterator[Daemon]:
    """A daemon mounting through ``server_url`` with ``token`` (by the environment)."""
    argv = ["mount", "--server", server_url]
    with _daemon(argv, root, {**os.environ, "MNEMOFS_TOKEN": token}, *extra) as daemon:
        yield daemon


@contextmanager
def mounted(db_url: str, session_id: str, root: Path, *extra: str) -> Iterator[Daemon]:
    """Serve ``session_id`` at ``root`` in a daemon process for the duration of the block."""
    if VIA == "remote":
        with remote_server(db_url, root.parent) as server:
            env = {**os.environ, "MNEMOFS_TOKEN": token_for(db_url, session_id)}
            with _daemon(["mount", "--server", server.url], root, env, *extra) as daemon:
                yield daemon
        return
    with _daemon(["--db", db_url, "mount", "--session", session_id], root, None, *extra) as daemon:
        yield daemon


@contextmanager
def _daemon(
    where: list[str], root: Path, env: dict[str, str] | None, *extra: str
) -> Iterator[Daemon]:
    require_fuse()
    with contextlib.suppress(FileExistsError):  # a stale mount, which the daemon cleans up
        root.mkdir(parents=True)
    argv = [sys.executable, "-m", "mnemofs", *where, "--root", str(root), "--foreground", *extra]
    # The daemon's log goes to a file next to the mount point (a pipe nobody reads would
    # block a daemon that logs much).
    log = root.parent / f"{root.name}.daemon.log"
    with open(log, "a") as stderr:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    daemon = Daemon(process, root, log)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("mnemofs: mounted"):
            process.wait(timeout=READY_TIMEOUT_S)
            pytest.fail(f"mount did not start: {line!r} {log.read_text()[-2000:]}")
        yield daemon
    finally:
        daemon.stop()
        subprocess.run(["fusermount3", "-u", "-z", str(root)], capture_output=True, check=False)


def wait_for(predicate: object, timeout: float = 2.0) -> bool:
    """Poll ``predicate()`` until true or ``timeout``; a test asserts the result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(predicate())  # type: ignore[operator]


def versions(service: MemoryService, store_id: str) -> list[tuple[str, str]]:
    """The store's whole version list, newest first, as (operation, path)."""
    return [(v.operation, v.path) for v in service.list_versions(store_id)]


def run(
    *argv: str, cwd: Path | None = None, user: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    if user:
        argv = ("runuser", "-u", user, "--", *argv)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=check)


def errno_of(fn: object, *args: object) -> int:
    """The errno ``fn(*args)`` fails with; 0 if it does not fail."""
    try:
        fn(*args)  # type: ignore[operator]
    except OSError as exc:
        return exc.errno or 0
    return 0
