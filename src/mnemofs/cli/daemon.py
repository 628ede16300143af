"""Running the mount daemon for the CLI: in the foreground, in the background, and stopping it.

``mnemofs mount`` without ``--foreground`` starts the same command with ``--foreground`` as a
detached process and returns only when that process says the mount is ready (through a pipe),
or reports why it failed. Logs go to a file beside the daemon's pid record.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import click

from mnemofs import mounts
from mnemofs.backend import Backend
from mnemofs.errors import NotFound
from mnemofs.models import Session
from mnemofs.mounts import MountOptions
from mnemofs.private import open_private_log
from mnemofs.remote import ENV_TOKEN, RemoteBackend

__all__ = ["MountOptions", "serve_foreground", "start_background", "stop"]

STOP_TIMEOUT_S = 60.0


def serve_foreground(
    service: Backend, session: Session, options: MountOptions, *, ready_fd: int | None
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if options.debug else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )

    def ready() -> None:
        stores = len(session.resources)
        click.echo(f"mnemofs: mounted {stores} store(s) at {options.root} (session {session.id})")
        sys.stdout.flush()
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)

    from mnemofs.fs import mount  # pyfuse3 and trio: only a serving process loads them

    try:
        mount.serve(service, session, options, ready=ready)
    except mount.MountError as exc:
        raise click.ClickException(str(exc)) from None


def start_background(
    db: str | None, session: Session, options: MountOptions, *, remote: RemoteBackend | None
) -> None:
    log_path = mounts.state_dir() / (mounts.record_path(options.root).stem + ".log")
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", "mnemofs"]
    env = None
    if db and remote is None:
        argv += ["--db", db]
    argv.append("mount")
    if remote is not None:  # the token goes by the environment, never a command line
        argv += ["--server", remote.server]
        env = {**os.environ, ENV_TOKEN: remote.token}
    else:
        argv += ["--session", session.id]
    argv += [
        "--root",
        options.root,
        "--foreground",
        "--ready-fd",
        str(write_fd),
    ]
    for flag, on in (
        ("--allow-other", options.allow_other),
        ("--debug", options.debug),
        ("--group-access", options.group_access),
    ):
        if on:
            argv.append(flag)
    if options.uid is not None:
        argv += ["--uid", str(options.uid)]
    if options.gid is not None:
        argv += ["--gid", str(options.gid)]
    with open_private_log(log_path) as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,),
            start_new_session=True,
            env=env,
        )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        answer = pipe.read()
    if answer.startswith(b"ready"):
        click.echo(f"mounted {options.root} (pid {child.pid}, log {log_path})")
        return
    code = child.wait()
    tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
    raise click.ClickException(f"mount failed (exit {code}): {tail[0]}")


def stop(root: str) -> None:
    """SIGTERM the daemon serving ``root`` and wait for it; else lazily unmount what is left."""
    record = mounts.read_record(root)
    pid = record.get("pid") if record else None
    if isinstance(pid, int) and mounts.pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while mounts.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if mounts.pid_alive(pid):
            raise click.ClickException(f"daemon {pid} did not stop within {STOP_TIMEOUT_S:.0f} s")
        return
    if mounts.mount_type(root) == "fuse.mnemofs":  # a dead daemon's mount; leave any other
        mounts.lazy_unmount(root)
        return
    raise NotFound(f"nothing is mounted at {root}")
