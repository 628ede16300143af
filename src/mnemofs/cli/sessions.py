"""``mnemofs sessions``: sessions, their prompt note, ending them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from mnemofs import errors
from mnemofs.cli.common import (
    Context,
    emit,
    parse_attach,
    pass_ctx,
    print_fields,
    print_table,
)
from mnemofs.limits import (
    DEFAULT_MOUNT_ROOT,
)
from mnemofs.models import Session
from mnemofs.store import prompt_note


@click.group()
def sessions() -> None:
    """Create sessions that attach stores, show their prompt note, end them."""


def load_spec(ctx: Context, file: str) -> list[dict[str, Any]]:
    import yaml  # here: ~12 ms of every command's start otherwise

    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
        loaded = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"cannot read --spec {file!r}: {exc}") from None
    if isinstance(loaded, dict) and "resources" in loaded:
        loaded = loaded["resources"]
    if not isinstance(loaded, list):
        raise errors.InvalidRequest(f"--spec {file!r} must hold a list of attachments")
    resources = []
    for item in loaded:
        if isinstance(item, dict) and isinstance(item.get("memory_store_id"), str):
            item = {**item, "memory_store_id": ctx.store(item["memory_store_id"])}
        resources.append(item)
    return resources


def show_session(ctx: Context, session: Session) -> None:
    def table() -> None:
        print_fields(
            [
                ("id", session.id),
                ("created_at", session.created_at),
                ("ended_at", session.ended_at),
                ("mount_root", session.mount_root),
                ("user_id", session.user_id),
            ]
        )
        click.echo("")
        print_table(
            ["STORE", "NAME", "ACCESS", "MOUNT PATH"],
            [(a.memory_store_id, a.name, a.access, a.mount_path) for a in session.resources],
        )

    emit(ctx, session, table)


@sessions.command("create")
@click.option(
    "--attach",
    "attach",
    multiple=True,
    metavar="STORE[:MODE]",
    help="Attach STORE read_write (default) or read_only; repeat for more.",
)
@click.option(
    "--spec",
    metavar="FILE",
    help="JSON or YAML list of attachments: type, memory_store_id, access, "
    "instructions ('-' for stdin).",
)
@click.option(
    "--root",
    default=DEFAULT_MOUNT_ROOT,
    show_default=True,
    help="Where the session's stores are mounted.",
)
@click.option(
    "--user",
    "user",
    metavar="USER_ID",
    help="Act for this end user: general stores and the user's only (all of them, "
    "when nothing is attached explicitly).",
)
@pass_ctx
def sessions_create(
    ctx: Context, attach: tuple[str, ...], spec: str | None, root: str, user: str | None
) -> None:
    """Create a session with its attached stores (fixed for its lifetime)."""
    resources = [parse_attach(ctx, a) for a in attach]
    if spec:
        resources += load_spec(ctx, spec)
    show_session(ctx, ctx.service.create_session(resources, mount_root=root, user=user))


@sessions.command("show")
@click.argument("session")
@pass_ctx
def sessions_show(ctx: Context, session: str) -> None:
    """Show a session and where each store is mounted."""
    show_session(ctx, ctx.service.get_session(session))


@sessions.command("prompt")
@click.argument("session")
@pass_ctx
def sessions_prompt(ctx: Context, session: str) -> None:
    """Print the prompt note to add to the agent's system prompt."""
    note = prompt_note(ctx.service.get_session(session))
    emit(ctx, {"session_id": session, "prompt": note}, lambda: click.echo(note, nl=False))


@sessions.command("end")
@click.argument("session")
@pass_ctx
def sessions_end(ctx: Context, session: str) -> None:
    """End a session."""
    show_session(ctx, ctx.service.end_session(session))


@sessions.command("list")
@click.option("--store", "store", metavar="STORE", help="Only sessions this store is attached to.")
@pass_ctx
def sessions_list(ctx: Context, store: str | None) -> None:
    """List sessions, newest first."""
    store_id = ctx.store(store) if store else None
    found = list(ctx.service.list_sessions(memory_store_id=store_id, limit=100))
    emit(
        ctx,
        {"data": [s.to_dict() for s in found], "next_page": None},
        lambda: print_table(
            ["ID", "CREATED", "ENDED", "STORES"],
            [(s.id, s.created_at, s.ended_at or "", len(s.resources)) for s in found],
        ),
    )


@sessions.command("token")
@click.argument("session")
@pass_ctx
def sessions_token(ctx: Context, session: str) -> None:
    """Print a bearer token that reaches SESSION and its stores only (shown once: it is kept
    only as a hash). Give it to the sandbox; it dies when the session ends."""
    made = ctx.service.create_session_token(session)
    emit(ctx, made, lambda: click.echo(made.token))
