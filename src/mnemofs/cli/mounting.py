"""``mnemofs mount``, ``mnemofs sync`` and ``mnemofs umount``: a session's stores as files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from mnemofs.cli.common import (
    Context,
    parse_attach,
    pass_ctx,
)
from mnemofs.limits import (
    DEFAULT_MOUNT_ROOT,
)
from mnemofs.models import Session
from mnemofs.remote import ENV_SERVER, ENV_TOKEN, RemoteBackend

# The options that put a mount or a sync worker behind ``mnemofs serve`` instead of the database.
_SERVER_OPTIONS = (
    click.option(
        "--server",
        metavar="URL",
        envvar=ENV_SERVER,
        help=f"Work through this mnemofs server (${ENV_SERVER}) with a session token, "
        "holding no database: the session is the token's.",
    ),
    click.option(
        "--token-file",
        metavar="FILE",
        help=f"Read the session token from FILE (or set ${ENV_TOKEN}; both keep it off the "
        "command line).",
    ),
    click.option(
        "--token", metavar="TOKEN", help="The session token itself (prefer --token-file)."
    ),
)


def server_options(command: Any) -> Any:
    for option in reversed(_SERVER_OPTIONS):
        command = option(command)
    return command


def remote_backend(
    server: str | None, token: str | None, token_file: str | None
) -> RemoteBackend | None:
    """The HTTP backend that ``--server`` asks for, or None for the database."""
    if not server:
        if token or token_file:
            raise click.UsageError("--token and --token-file go with --server URL")
        return None
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.UsageError(f"cannot read --token-file {token_file!r}: {exc}") from None
    token = token or os.environ.get(ENV_TOKEN, "").strip()
    if not token:
        raise click.UsageError(f"--server needs a session token: --token-file FILE or ${ENV_TOKEN}")
    return RemoteBackend(server, token)


def session_or_attach(
    ctx: Context, session_id: str | None, attach: tuple[str, ...], root: str | None
) -> tuple[Session, str]:
    """The session to serve and its root: ``--session`` names one; ``--attach`` creates one
    (its id printed) with ``--root`` or the default root as its mount root."""
    if bool(session_id) == bool(attach):
        raise click.UsageError("give --session SESSION or --attach STORE[:MODE] ...")
    if session_id:
        session = ctx.service.get_session(session_id)
    else:
        session = ctx.service.create_session(
            [parse_attach(ctx, a) for a in attach],
            mount_root=os.path.abspath(root or DEFAULT_MOUNT_ROOT),
        )
        click.echo(session.id)
    return session, os.path.abspath(root or session.mount_root)


@click.command("mount")
@click.option("--session", "session_id", metavar="SESSION", help="Mount this session's stores.")
@click.option(
    "--attach",
    "attach",
    multiple=True,
    metavar="STORE[:MODE]",
    help="Create a session attaching STORE (read_write); repeatable.",
)
@click.option(
    "--root",
    metavar="DIR",
    help=f"Mount point (default: the session's, else {DEFAULT_MOUNT_ROOT}).",
)
@click.option("--foreground", is_flag=True, help="Serve in this process until SIGINT/SIGTERM.")
@click.option("--allow-other", is_flag=True, help="Let other users (a sandbox's) use the mount.")
@click.option("--uid", type=int, help="Owner shown for every file (default: this user).")
@click.option("--gid", type=int, help="Group shown for every file (default: this group).")
@click.option(
    "--group-access",
    is_flag=True,
    help="Members of --gid may read and write too (modes 0660/0770); without it the "
    "mount is owner-only (0600/0700) and others get EACCES.",
)
@click.option("--debug", is_flag=True, help="Log every FUSE request.")
@click.option("--ready-fd", type=int, hidden=True)
@server_options
@pass_ctx
def mount(
    ctx: Context,
    session_id: str | None,
    attach: tuple[str, ...],
    root: str | None,
    foreground: bool,
    allow_other: bool,
    uid: int | None,
    gid: int | None,
    group_access: bool,
    debug: bool,
    ready_fd: int | None,
    server: str | None,
    token_file: str | None,
    token: str | None,
) -> None:
    """Mount a session's stores as directories under ROOT (one per store).

    Returns once the mount is ready (or, with --foreground, prints one line then and serves).
    """
    from mnemofs.cli import daemon

    remote = remote_backend(server, token, token_file)
    if remote is not None:
        if session_id or attach:
            raise click.UsageError(
                "with --server the session is the token's: no --session/--attach"
            )
        session = remote.own_session()
        root = os.path.abspath(root or session.mount_root)
    else:
        session, root = session_or_attach(ctx, session_id, attach, root)
    options = daemon.MountOptions(root, allow_other, uid, gid, debug, group_access)
    if foreground:
        daemon.serve_foreground(remote or ctx.service, session, options, ready_fd=ready_fd)
    else:
        daemon.start_background(ctx.db, session, options, remote=remote)


@click.command("sync")
@click.option("--session", "session_id", metavar="SESSION", help="Sync this session's stores.")
@click.option(
    "--attach",
    "attach",
    multiple=True,
    metavar="STORE[:MODE]",
    help="Create a session attaching STORE (repeat), print its id, sync it.",
)
@click.option(
    "--root",
    metavar="DIR",
    help="Where the stores' folders go (default: the session's mount root).",
)
@click.option(
    "--interval",
    type=float,
    default=15.0,
    show_default=True,
    help="Seconds between reconciles (at least 1).",
)
@click.option("--once", is_flag=True, help="Reconcile once and exit (for hooks and cron).")
@click.option("--foreground", is_flag=True, help="Stay in the foreground until SIGINT/SIGTERM.")
@server_options
@pass_ctx
def sync(
    ctx: Context,
    session_id: str | None,
    attach: tuple[str, ...],
    root: str | None,
    interval: float,
    once: bool,
    foreground: bool,
    server: str | None,
    token_file: str | None,
    token: str | None,
) -> None:
    """Keep a local folder per attached store in step with the database (no FUSE needed).

    Reconciles at most every --interval seconds and once more on SIGINT/SIGTERM. Without
    --foreground or --once, the first reconcile runs here and a background worker continues.
    """
    from mnemofs.cli import syncing

    if interval < 1:
        raise click.UsageError(f"--interval must be at least 1 second, got {interval}")
    remote = remote_backend(server, token, token_file)
    if remote is not None:
        if session_id or attach:
            raise click.UsageError(
                "with --server the session is the token's: no --session/--attach"
            )
        session = remote.own_session()
        folder = os.path.abspath(root or session.mount_root)
        syncing.run(remote, ctx.db, session, folder, interval, once=once, foreground=foreground)
        return
    session, folder = session_or_attach(ctx, session_id, attach, root)
    syncing.run(None, ctx.db, session, folder, interval, once=once, foreground=foreground)


@click.command("umount")
@click.option(
    "--root",
    default=DEFAULT_MOUNT_ROOT,
    show_default=True,
    metavar="DIR",
    help="The mount point to unmount.",
)
@pass_ctx
def umount(ctx: Context, root: str) -> None:
    """Unmount ROOT: the daemon saves open files, unmounts and exits."""
    from mnemofs.cli import daemon

    daemon.stop(os.path.abspath(root))
    click.echo(f"unmounted {os.path.abspath(root)}")
