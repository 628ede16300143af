"""``mnemofs memories``: the memories of a store."""

from __future__ import annotations

import sys

import click

from mnemofs.cli.common import (
    Context,
    emit,
    emit_listing,
    pass_ctx,
    print_fields,
    read_content,
)
from mnemofs.limits import (
    MAX_PAGE_LIMIT,
)
from mnemofs.models import Deleted, Memory


@click.group()
def memories() -> None:
    """Create, read, list, update and delete the memories in a store."""


def show_memory(ctx: Context, memory: Memory) -> None:
    def table() -> None:
        print_fields(
            [
                ("id", memory.id),
                ("path", memory.path),
                ("content_size_bytes", memory.content_size_bytes),
                ("content_sha256", memory.content_sha256),
                ("memory_version_id", memory.memory_version_id),
                ("created_at", memory.created_at),
                ("updated_at", memory.updated_at),
            ]
        )
        if memory.content is not None:
            click.echo("")
            click.echo(memory.content, nl=not memory.content.endswith("\n"))

    emit(ctx, memory, table)


@memories.command("create")
@click.argument("store")
@click.argument("path")
@click.option("--content", help="The content (else --file, else standard input).")
@click.option("--file", metavar="F", help="Read the content from file F ('-' for stdin).")
@pass_ctx
def memories_create(
    ctx: Context, store: str, path: str, content: str | None, file: str | None
) -> None:
    """Create a memory at PATH; an existing path is a conflict."""
    store_id = ctx.store(store)
    text = read_content(content, file, stdin_default=True)
    assert text is not None
    show_memory(ctx, ctx.service.create_memory(store_id, path, text))


@memories.command("list")
@click.argument("store")
@click.option("--path-prefix", default="/", show_default=True, help="A directory, ending in '/'.")
@click.option(
    "--depth",
    type=int,
    default=0,
    show_default=True,
    help="0: the whole subtree; 1: immediate children and directories.",
)
@click.option("--limit", type=int, help="One page of this many entries (default: all).")
@click.option(
    "--page",
    "cursor",
    help="Continue with the page this next_page value names (--limit asks one page).",
)
@pass_ctx
def memories_list(
    ctx: Context, store: str, path_prefix: str, depth: int, limit: int | None, cursor: str | None
) -> None:
    """List memories in path order, without content."""
    store_id = ctx.store(store)
    page = ctx.service.list_memories(
        store_id,
        path_prefix=path_prefix,
        depth=depth,
        limit=MAX_PAGE_LIMIT if limit is None else limit,
        cursor=cursor,
    )
    emit_listing(
        ctx,
        page,
        one_page=limit is not None,
        headers=["TYPE", "PATH", "SIZE", "SHA256", "UPDATED", "ID"],
        row=lambda e: (
            (e.type, e.path, e.content_size_bytes, e.content_sha256[:12], e.updated_at, e.id)
            if isinstance(e, Memory)
            else (e.type, e.path, "", "", "", "")
        ),
    )


@memories.command("show")
@click.argument("store")
@click.argument("memory")
@pass_ctx
def memories_show(ctx: Context, store: str, memory: str) -> None:
    """Show a memory: its fields, then its content."""
    store_id = ctx.store(store)
    show_memory(ctx, ctx.service.get_memory(store_id, ctx.memory(store_id, memory)))


@memories.command("cat")
@click.argument("store")
@click.argument("memory")
@pass_ctx
def memories_cat(ctx: Context, store: str, memory: str) -> None:
    """Print a memory's content, exactly as stored."""
    store_id = ctx.store(store)
    content = ctx.service.get_memory(store_id, ctx.memory(store_id, memory)).content or ""
    sys.stdout.buffer.write(content.encode())
    sys.stdout.flush()


@memories.command("update")
@click.argument("store")
@click.argument("memory")
@click.option("--content", help="The new content.")
@click.option("--file", metavar="F", help="Read the new content from file F ('-' for stdin).")
@click.option("--path", "new_path", metavar="NEW", help="Move the memory to path NEW.")
@click.option(
    "--if-sha256", metavar="H", help="Apply only while the stored content's SHA-256 is still H."
)
@pass_ctx
def memories_update(
    ctx: Context,
    store: str,
    memory: str,
    content: str | None,
    file: str | None,
    new_path: str | None,
    if_sha256: str | None,
) -> None:
    """Change a memory's content, its path, or both (one new version)."""
    store_id = ctx.store(store)
    text = read_content(content, file, stdin_default=False)
    precondition = {"type": "content_sha256", "content_sha256": if_sha256} if if_sha256 else None
    show_memory(
        ctx,
        ctx.service.update_memory(
            store_id,
            ctx.memory(store_id, memory),
            content=text,
            path=new_path,
            precondition=precondition,
        ),
    )


@memories.command("delete")
@click.argument("store")
@click.argument("memory")
@click.option(
    "--expected-sha256",
    metavar="HASH",
    help="Delete only while the memory's content_sha256 is still HASH.",
)
@pass_ctx
def memories_delete(ctx: Context, store: str, memory: str, expected_sha256: str | None) -> None:
    """Delete a memory (its versions stay; an archived store allows it, as the API does)."""
    store_id = ctx.store(store)
    version = ctx.service.delete_memory(
        store_id,
        ctx.memory(store_id, memory),
        expected_content_sha256=expected_sha256,
        archived_ok=True,
    )
    emit(
        ctx,
        Deleted(version.memory_id, "memory_deleted"),
        lambda: click.echo(f"deleted {version.path} ({version.id})"),
    )
