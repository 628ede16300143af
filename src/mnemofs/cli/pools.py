"""``mnemofs pools``: stores that share one capacity (issue 20, seed 001)."""

from __future__ import annotations

from typing import Any

import click

from mnemofs import limits
from mnemofs.cli.common import Context, emit, pass_ctx, print_fields, print_table
from mnemofs.models import CapacityPool


@click.group()
def pools() -> None:
    """Capacity pools: stores sharing one capacity (an agent's general store and all its end
    users' stores, say), which refuse or evict the least recently accessed when full."""


def show_pool(ctx: Context, pool: CapacityPool) -> None:
    emit(
        ctx,
        pool,
        lambda: print_fields(
            [
                ("id", pool.id),
                ("name", pool.name),
                ("max_memories", pool.max_memories),
                ("on_full", pool.on_full),
                ("memories", pool.memory_count),
                ("stores", ", ".join(pool.memory_store_ids)),
                ("created_at", pool.created_at),
            ]
        ),
    )


ON_FULL = click.Choice(["refuse", "evict-lru"])


@pools.command("create")
@click.argument("name")
@click.option("--max-memories", type=int, required=True, help="Live memories over all stores.")
@click.option("--on-full", type=ON_FULL, default="refuse", show_default=True)
@pass_ctx
def pools_create(ctx: Context, name: str, max_memories: int, on_full: Any) -> None:
    """Create a pool NAME holding at most --max-memories over its stores."""
    ctx.may_create = True
    show_pool(ctx, ctx.service.create_pool(name, max_memories, on_full=on_full))


@pools.command("list")
@pass_ctx
def pools_list(ctx: Context) -> None:
    """Every pool with its capacity and how full it is."""
    found = ctx.service.list_pools()
    emit(
        ctx,
        {"data": [p.to_dict() for p in found]},
        lambda: print_table(
            ["ID", "NAME", "MEMORIES", "MAX", "ON_FULL", "STORES"],
            [
                (p.id, p.name, p.memory_count, p.max_memories, p.on_full, len(p.memory_store_ids))
                for p in found
            ],
        ),
    )


@pools.command("show")
@click.argument("pool")
@pass_ctx
def pools_show(ctx: Context, pool: str) -> None:
    """One pool (POOL: its id or name)."""
    show_pool(ctx, ctx.service.get_pool(ctx.service.resolve_pool(pool)))


@pools.command("add")
@click.argument("pool")
@click.argument("stores", nargs=-1, required=True)
@pass_ctx
def pools_add(ctx: Context, pool: str, stores: tuple[str, ...]) -> None:
    """Put STORES in POOL (refused for a store in another pool, or past the capacity)."""
    pool_id = ctx.service.resolve_pool(pool)
    result = ctx.service.set_pool([ctx.store(s) for s in stores], pool_id)
    assert result is not None
    show_pool(ctx, result)


@pools.command("remove")
@click.argument("stores", nargs=-1, required=True)
@pass_ctx
def pools_remove(ctx: Context, stores: tuple[str, ...]) -> None:
    """Take STORES out of their pool (they keep their memories and own caps)."""
    ctx.service.set_pool([ctx.store(s) for s in stores], None)
    emit(ctx, {"removed": list(stores)}, lambda: click.echo(f"{len(stores)} store(s) out"))


@pools.command("update")
@click.argument("pool")
@click.option("--max-memories", type=int, help="The new capacity.")
@click.option("--on-full", type=ON_FULL)
@click.option("--evict", is_flag=True, help="A lower capacity of an evict-lru pool evicts now.")
@pass_ctx
def pools_update(
    ctx: Context, pool: str, max_memories: int | None, on_full: Any, evict: bool
) -> None:
    """Change a pool's capacity or policy. A capacity under what the pool holds is refused,
    saying how many it would evict (--evict, for an evict-lru pool, evicts them now)."""
    pool_id = ctx.service.resolve_pool(pool)
    show_pool(
        ctx,
        ctx.service.update_pool(pool_id, max_memories=max_memories, on_full=on_full, evict=evict),
    )


@pools.command("delete")
@click.argument("pool")
@pass_ctx
def pools_delete(ctx: Context, pool: str) -> None:
    """Delete a pool; its stores stay, with their memories."""
    pool_id = ctx.service.resolve_pool(pool)
    ctx.service.delete_pool(pool_id)
    emit(ctx, {"deleted": pool_id}, lambda: click.echo(f"deleted {pool_id}"))


@pools.command("search")
@click.argument("pool")
@click.argument("query")
@click.option("--user", metavar="USER_ID", help="Only what this end user sees (general + own).")
@click.option("--limit", type=int, default=limits.DEFAULT_SEARCH_LIMIT, show_default=True)
@pass_ctx
def pools_search(ctx: Context, pool: str, query: str, user: str | None, limit: int) -> None:
    """Search every store of POOL, best first; --user filters by end user."""
    hits = ctx.service.search_pool(ctx.service.resolve_pool(pool), query, user=user, limit=limit)
    emit(
        ctx,
        {"data": [h.to_dict() for h in hits]},
        lambda: print_table(
            ["STORE", "PATH", "SNIPPET"],
            [(h.memory_store_id, h.path, " ".join(h.snippet.split())) for h in hits],
        ),
    )
