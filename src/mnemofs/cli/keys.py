"""``mnemofs keys``: the admin API keys of ``mnemofs serve``."""

from __future__ import annotations

import click

from mnemofs.cli.common import Context, emit, pass_ctx, print_table


@click.group()
def keys() -> None:
    """Create, list and revoke the API keys that administer the HTTP API."""


@keys.command("create")
@click.argument("name")
@pass_ctx
def keys_create(ctx: Context, name: str) -> None:
    """Create a key named NAME and print it, once: only its hash is kept."""
    ctx.may_create = True  # the first key of a new server's database
    made = ctx.service.create_api_key(name)
    emit(ctx, made, lambda: click.echo(made.key))
    if not ctx.as_json:
        click.echo(f"{made.id} ({name}): shown once, store it now", err=True)


@keys.command("list")
@pass_ctx
def keys_list(ctx: Context) -> None:
    """List keys (never their secrets)."""
    found = ctx.service.list_api_keys()
    emit(
        ctx,
        {"data": [k.to_dict() for k in found], "next_page": None},
        lambda: print_table(
            ["ID", "NAME", "CREATED", "REVOKED"],
            [(k.id, k.name, k.created_at, k.revoked_at or "") for k in found],
        ),
    )


@keys.command("revoke")
@click.argument("key_id")
@pass_ctx
def keys_revoke(ctx: Context, key_id: str) -> None:
    """Revoke a key: every request with it is refused from now on."""
    revoked = ctx.service.revoke_api_key(key_id)
    emit(ctx, revoked, lambda: click.echo(f"revoked {revoked.id} ({revoked.name})"))
