"""``mnemofs stores restore|fork``: a store as it was at a time (issue 19)."""

from __future__ import annotations

import json

import click

from mnemofs.cli.common import Context, pass_ctx
from mnemofs.cli.stores import show_store

AT = click.option(
    "--at", "at", required=True, metavar="TIME", help="RFC 3339, e.g. 2026-12-01T09:30Z."
)


@click.command("restore")
@click.argument("store")
@AT
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@pass_ctx
def store_restore(ctx: Context, store: str, at: str, dry_run: bool) -> None:
    """Make STORE's memories what they were at TIME, in one transaction: one version per
    memory whose content or path differs, a deletion for each made since, a re-creation
    for each deleted since. Refused for journals, and for a time before pruned history."""
    steps = ctx.service.restore_store(ctx.store(store), at, dry_run=dry_run)
    if ctx.as_json:
        data = [
            {"action": s.action, "memory_id": s.memory_id, "path": s.path, "was": s.was}
            for s in steps
        ]
        click.echo(json.dumps({"data": data, "dry_run": dry_run}, indent=2))
        return
    for step in steps:
        click.echo(str(step))
    what = "would change" if dry_run else "changed"
    click.echo(f"{len(steps)} memories {what}" if steps else "nothing to change: already so")


@click.command("fork")
@click.argument("store")
@AT
@click.option("--name", required=True, help="The new store's name.")
@pass_ctx
def store_fork(ctx: Context, store: str, at: str, name: str) -> None:
    """A new store holding STORE's memories as they were at TIME (each one new version;
    its metadata names the store and time it came from)."""
    show_store(ctx, ctx.service.fork_store(ctx.store(store), at, name=name))
