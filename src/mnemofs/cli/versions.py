"""``mnemofs versions``: audit, redact and prune versions."""

from __future__ import annotations

import click

from mnemofs.cli.common import (
    Context,
    actor_text,
    emit,
    emit_listing,
    pass_ctx,
    print_fields,
)
from mnemofs.limits import (
    DEFAULT_KEEP_VERSIONS,
    DEFAULT_RETENTION_DAYS,
    MAX_PAGE_LIMIT,
)
from mnemofs.models import MemoryVersion


@click.group()
def versions() -> None:
    """Audit, redact and prune the immutable versions of a store's memories."""


def show_version(ctx: Context, version: MemoryVersion) -> None:
    def table() -> None:
        print_fields(
            [
                ("id", version.id),
                ("memory_id", version.memory_id),
                ("operation", version.operation),
                ("path", version.path),
                ("content_size_bytes", version.content_size_bytes),
                ("content_sha256", version.content_sha256),
                ("created_by", actor_text(version.created_by)),
                ("created_at", version.created_at),
                ("redacted_at", version.redacted_at),
                ("redacted_by", actor_text(version.redacted_by)),
            ]
        )
        if version.content is not None:
            click.echo("")
            click.echo(version.content, nl=not version.content.endswith("\n"))

    emit(ctx, version, table)


@versions.command("list")
@click.argument("store")
@click.option("--memory", help="Only this memory's versions (a mem_ id, or a live path).")
@click.option("--limit", type=int, help="One page of this many versions (default: all).")
@click.option(
    "--page",
    "cursor",
    help="Continue with the page this next_page value names (--limit asks one page).",
)
@pass_ctx
def versions_list(
    ctx: Context, store: str, memory: str | None, limit: int | None, cursor: str | None
) -> None:
    """List versions, newest first, without content."""
    store_id = ctx.store(store)
    memory_id = ctx.memory(store_id, memory) if memory else None
    page = ctx.service.list_versions(
        store_id,
        memory_id=memory_id,
        limit=MAX_PAGE_LIMIT if limit is None else limit,
        cursor=cursor,
    )
    emit_listing(
        ctx,
        page,
        one_page=limit is not None,
        headers=["ID", "OPERATION", "PATH", "SIZE", "CREATED_BY", "CREATED", "REDACTED"],
        row=lambda v: (
            v.id,
            v.operation,
            v.path or "",
            "" if v.content_size_bytes is None else v.content_size_bytes,
            actor_text(v.created_by),
            v.created_at,
            v.redacted_at or "",
        ),
    )


@versions.command("show")
@click.argument("store")
@click.argument("version")
@pass_ctx
def versions_show(ctx: Context, store: str, version: str) -> None:
    """Show a version with its content."""
    show_version(ctx, ctx.service.get_version(ctx.store(store), version))


@versions.command("redact")
@click.argument("store")
@click.argument("version")
@pass_ctx
def versions_redact(ctx: Context, store: str, version: str) -> None:
    """Clear a version's content, keeping who, what and when."""
    show_version(ctx, ctx.service.redact_version(ctx.store(store), version))


@versions.command("prune")
@click.argument("store")
@click.option(
    "--older-than-days",
    type=float,
    default=DEFAULT_RETENTION_DAYS,
    show_default=True,
    help="Remove versions older than this many days...",
)
@click.option(
    "--keep-last",
    type=int,
    default=DEFAULT_KEEP_VERSIONS,
    show_default=True,
    help="...except the newest this many of each live memory.",
)
@pass_ctx
def versions_prune(ctx: Context, store: str, older_than_days: float, keep_last: int) -> None:
    """Remove old versions, always keeping each live memory's newest ones."""
    removed = ctx.service.prune_versions(
        ctx.store(store), older_than_days=older_than_days, keep_last=keep_last
    )
    emit(ctx, {"pruned": removed}, lambda: click.echo(f"pruned {removed} version(s)"))
