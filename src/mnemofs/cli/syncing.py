"""``mnemofs sync``: run the sync worker once, in the foreground, or in the background."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import click

from mnemofs.backend import Backend
from mnemofs.models import Session
from mnemofs.private import open_private_log
from mnemofs.remote import ENV_TOKEN, RemoteBackend
from mnemofs.store import MemoryService, make_engine
from mnemofs.sync import ERRORS_FILE, SyncWorker
from mnemofs.syncstate import Report

log = logging.getLogger("mnemofs.sync")


def run(
    remote: RemoteBackend | None,
    db: str | None,
    session: Session,
    root: str,
    interval: float,
    *,
    once: bool,
    foreground: bool,
) -> None:
    """Reconcile (as the session) once; then exit, loop here, or hand over to a worker. With
    ``remote`` every change goes through the server; else through the database ``db``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    service: Backend = remote or MemoryService(make_engine(db), actor=session.id)
    worker = SyncWorker(service, session, Path(root), interval=interval)
    try:
        report = worker.reconcile()
        click.echo(
            f"mnemofs: synced {len(session.resources)} store(s) at {root} "
            f"(session {session.id}): {summary(report)}"
        )
        if once:
            if report.errors:  # as `memories export`: done, but not everything is in step
                click.echo(
                    f"mnemofs: {len(report.errors)} problem(s) left out of step: see "
                    f"{Path(root) / ERRORS_FILE}",
                    err=True,
                )
                sys.exit(1)
            return
        if not foreground:
            _start_background(db, session, root, interval, remote)
            return
        sys.stdout.flush()
        worker.watch_local_changes()
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        while not stop.wait(interval):
            _log(worker.reconcile())
        log.info("stopping: one last reconcile")
        _log(worker.reconcile())
    finally:
        service.close()


def summary(report: Report) -> str:
    parts = [f"{len(v)} {k.replace('_', ' ')}" for k, v in vars(report).items() if v]
    return ", ".join(parts) or "nothing to do"


def _log(report: Report) -> None:
    if any(vars(report).values()):
        log.info("reconciled: %s", summary(report))


def _start_background(
    db: str | None, session: Session, root: str, interval: float, remote: RemoteBackend | None
) -> None:
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    logfile = state / "mnemofs" / "sync" / f"{session.id}.log"
    env = None
    if remote is not None:  # the token goes by the environment, never a command line
        where = ["--server", remote.server]
        env = {**os.environ, ENV_TOKEN: remote.token}
    else:
        where = ["--session", session.id]
    argv = [
        sys.executable,
        "-m",
        "mnemofs",
        *(["--db", db] if db and remote is None else []),
        "sync",
        *where,
        "--root",
        root,
        "--interval",
        str(interval),
        "--foreground",
    ]
    with open_private_log(logfile) as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=env,
        )
    click.echo(
        f"syncing {root} in the background (pid {proc.pid}, log {logfile}); "
        f"stop it with: kill {proc.pid}"
    )
