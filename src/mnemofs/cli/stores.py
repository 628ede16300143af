"""``mnemofs stores``: create, inspect, rename, archive and delete stores."""

from __future__ import annotations

from typing import Any

import click

from mnemofs import limits
from mnemofs.cli.common import (
    Context,
    emit,
    pass_ctx,
    print_fields,
    print_table,
)
from mnemofs.models import Deleted, MemoryStore


@click.group()
def stores() -> None:
    """Create, inspect, rename, archive and delete memory stores."""


def show_store(ctx: Context, store: MemoryStore) -> None:
    emit(
        ctx,
        store,
        lambda: print_fields(
            [
                ("id", store.id),
                ("name", store.name),
                ("description", store.description),
                ("kind", store.kind),
                ("owner", store.owner),
                ("on_full", store.on_full),
                ("secrets", store.secrets),
                ("max_memories", store.max_memories or "(the global limit)"),
                ("max_content_bytes", store.max_content_bytes or "(the global limit)"),
                ("pool", store.pool_id or ""),
                ("metadata", ", ".join(f"{k}={v}" for k, v in store.metadata.items())),
                ("memories", store.memory_count),
                ("created_at", store.created_at),
                ("updated_at", store.updated_at),
                ("archived_at", store.archived_at),
            ]
        ),
    )


@stores.command("create")
@click.argument("name")
@click.option("--description", default="", help="Shown to the agent: what the store holds.")
@click.option(
    "--kind",
    type=click.Choice(["memory", "journal"]),
    default="memory",
    show_default=True,
    help="journal: a turn journal, attached read_only.",
)
@click.option(
    "--owner",
    metavar="USER_ID",
    default="",
    help="The end user the store belongs to (default: a general store).",
)
@click.option(
    "--on-full",
    type=click.Choice(["refuse", "evict-lru"]),
    default="refuse",
    show_default=True,
    help="When full: refuse a create, or evict the least recently read.",
)
@click.option(
    "--secrets",
    type=click.Choice(["refuse", "allow"]),
    default="refuse",
    show_default=True,
    help="refuse: a save holding a credential (a cloud key, a private key, a "
    "token, a URL with a password) is refused, naming kind and line.",
)
@click.option(
    "--metadata", "pairs", multiple=True, metavar="KEY=VALUE", help="A metadata pair (repeatable)."
)
@click.option("--max-memories", type=int, help="The store's own cap (below 10,000).")
@click.option(
    "--max-content-bytes", type=int, help="The store's own cap per memory (below 102,400)."
)
@pass_ctx
def stores_create(
    ctx: Context,
    name: str,
    description: str,
    kind: Any,
    owner: str,
    on_full: Any,
    secrets: Any,
    pairs: tuple[str, ...],
    max_memories: int | None,
    max_content_bytes: int | None,
) -> None:
    """Create a store named NAME."""
    ctx.may_create = True
    store = ctx.service.create_store(
        name,
        description,
        kind=kind,
        owner=owner,
        on_full=on_full,
        secrets=secrets,
        metadata={k: v for k, v in _pairs(pairs).items() if v is not None},
        max_memories=max_memories,
        max_content_bytes=max_content_bytes,
    )
    show_store(ctx, store)


def _pairs(pairs: tuple[str, ...], unset: tuple[str, ...] = ()) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--metadata")
        out[key] = value
    out.update((key, None) for key in unset)
    return out


@stores.command("list")
@click.option("--include-archived", is_flag=True, help="Also list archived stores.")
@pass_ctx
def stores_list(ctx: Context, include_archived: bool) -> None:
    """List stores (archived ones only with --include-archived)."""
    found = list(ctx.service.list_stores(include_archived=include_archived))
    emit(
        ctx,
        {"data": [s.to_dict() for s in found], "next_page": None},
        lambda: print_table(
            ["ID", "NAME", "MEMORIES", "CREATED", "ARCHIVED"],
            [(s.id, s.name, s.memory_count, s.created_at, s.archived_at or "") for s in found],
        ),
    )


@stores.command("show")
@click.argument("store")
@pass_ctx
def stores_show(ctx: Context, store: str) -> None:
    """Show one store."""
    show_store(ctx, ctx.service.get_store(ctx.store(store)))


@stores.command("usage")
@click.argument("store")
@pass_ctx
def stores_usage(ctx: Context, store: str) -> None:
    """What STORE holds: memories, the directories it keeps, versions, their distinct texts
    and bytes, its oldest version. History grows with every save until pruned
    ('mnemofs versions prune'): a runaway writer shows here."""
    used = ctx.service.store_usage(ctx.store(store))
    most = limits.MAX_DIRECTORIES_PER_STORE
    emit(
        ctx,
        used,
        lambda: print_fields(
            [
                ("memories", used["memories"]),
                ("directories", f"{used['directories']} (of at most {most})"),
                ("versions", used["versions"]),
                ("texts", used["texts"]),
                ("text_bytes", used["text_bytes"]),
                ("oldest_version_at", used["oldest_version_at"] or ""),
            ]
        ),
    )


@stores.command("update")
@click.argument("store")
@click.option("--name", help="The new name.")
@click.option("--description", help="The new description.")
@click.option(
    "--on-full",
    type=click.Choice(["refuse", "evict-lru"]),
    help="What a create does when the store is full.",
)
@click.option(
    "--secrets",
    type=click.Choice(["refuse", "allow"]),
    help="Whether a save holding a credential is refused.",
)
@click.option(
    "--metadata", "pairs", multiple=True, metavar="KEY=VALUE", help="Set a metadata pair."
)
@click.option("--unset-metadata", "unset", multiple=True, metavar="KEY", help="Remove a key.")
@click.option("--max-memories", type=int, help="The store's own cap (0: the global limit).")
@click.option(
    "--max-content-bytes", type=int, help="The store's own cap per memory (0: the global one)."
)
@click.option(
    "--evict", is_flag=True, help="A lower --max-memories in an evict-lru store evicts the excess."
)
@pass_ctx
def stores_update(
    ctx: Context,
    store: str,
    name: str | None,
    description: str | None,
    on_full: Any,
    secrets: Any,
    pairs: tuple[str, ...],
    unset: tuple[str, ...],
    max_memories: int | None,
    max_content_bytes: int | None,
    evict: bool,
) -> None:
    """Rename a store, change its description, metadata, capacity, caps or secrets policy.

    A cap under what the store holds is refused (a lower --max-memories in an evict-lru store
    says how many it would evict; add --evict to evict them now)."""
    store_id = ctx.store(store)
    show_store(
        ctx,
        ctx.service.update_store(
            store_id,
            name=name,
            description=description,
            on_full=on_full,
            secrets=secrets,
            metadata=_pairs(pairs, unset) if pairs or unset else None,
            max_memories=max_memories,
            max_content_bytes=max_content_bytes,
            evict=evict,
        ),
    )


@stores.command("archive")
@click.argument("store")
@pass_ctx
def stores_archive(ctx: Context, store: str) -> None:
    """Archive a store: read-only forever, never attached to new sessions."""
    show_store(ctx, ctx.service.archive_store(ctx.store(store)))


@stores.command("delete")
@click.argument("store")
@click.option("--yes", is_flag=True, help="Confirm: every memory and version goes with it.")
@pass_ctx
def stores_delete(ctx: Context, store: str, yes: bool) -> None:
    """Delete a store with all its memories and versions."""
    if not yes:
        raise click.UsageError("deleting a store removes all its memories and versions: add --yes")
    store_id = ctx.store(store)
    ctx.service.delete_store(store_id)
    emit(ctx, Deleted(store_id, "memory_store_deleted"), lambda: click.echo(f"deleted {store_id}"))
