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
@click.argument("words", nargs=-1, required=True, metavar="(STORE QUERY | --session SESSION QUERY)")
@click.option("--session", metavar="SESSION", help="Search every store the session has.")
@click.option(
    "--limit",
    type=int,
    default=limits.DEFAULT_SEARCH_LIMIT,
    show_default=True,
    help="At most this many hits.",
)
@pass_ctx
def search_command(ctx: Context, words: tuple[str, ...], session: str | None, limit: int) -> None:
    """Find live memories holding every word of QUERY, best first, with a snippet: in STORE,
    or with --session in every store attached to SESSION (hits by their path in the mount)."""
    if session is not None:
        if len(words) != 1:
            raise click.UsageError("with --session, give only the QUERY (quote it)")
        hits = ctx.service.search_session(session, words[0], limit=limit)
    else:
        if len(words) != 2:
            raise click.UsageError(
                "give STORE and QUERY (quote the query), or --session SESSION QUERY"
            )
        hits = ctx.service.search(ctx.store(words[0]), words[1], limit=limit)
    emit(
        ctx,
        {"data": [h.to_dict() for h in hits]},
        lambda: print_table(
            ["PATH", "SNIPPET"],
            [(h.mount_path or h.path, " ".join(h.snippet.split())) for h in hits],
        ),
    )
