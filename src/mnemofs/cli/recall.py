"""``mnemofs context`` and ``mnemofs search``: recall for an agent's next turn."""

from __future__ import annotations

import click

from mnemofs import limits
from mnemofs.cli.common import (
    Context,
    emit,
    pass_ctx,
    print_table,
)


@click.command("context")
@click.argument("session")
@click.option(
    "--max-words",
    type=int,
    default=limits.DEFAULT_CONTEXT_WORDS,
    show_default=True,
    help="At most this many words of memory content.",
)
@pass_ctx
def context_command(ctx: Context, session: str, max_words: int) -> None:
    """Print the text to inject into SESSION's next turn: its newest memories, newest first."""
    text = ctx.service.context(session, max_words=max_words)
    emit(ctx, {"session": session, "context": text}, lambda: click.echo(text, nl=False))


@click.command("search")
@click.argument("store")
@click.argument("query")
@click.option(
    "--limit",
    type=int,
    default=limits.DEFAULT_SEARCH_LIMIT,
    show_default=True,
    help="At most this many hits.",
)
@pass_ctx
def search_command(ctx: Context, store: str, query: str, limit: int) -> None:
    """Find STORE's live memories holding every word of QUERY, best first, with a snippet."""
    hits = ctx.service.search(ctx.store(store), query, limit=limit)
    emit(
        ctx,
        {"data": [h.to_dict() for h in hits]},
        lambda: print_table(
            ["PATH", "SNIPPET"], [(h.path, " ".join(h.snippet.split())) for h in hits]
        ),
    )
