"""``mnemofs journal``: turn journals."""

from __future__ import annotations

import json
import sys

import click

from mnemofs import errors, limits
from mnemofs.cli.common import (
    Context,
    emit,
    pass_ctx,
)


@click.group()
def journal() -> None:
    """Append agent turns to a journal store (one JSON line per turn)."""


@journal.command("append")
@click.argument("store")
@click.option("--record", metavar="JSON", help="One record (else JSON lines from stdin).")
@click.option(
    "--max-text-length",
    type=int,
    default=limits.DEFAULT_JOURNAL_TEXT_CHARS,
    show_default=True,
    help="Truncate userMessage, result and title to this many characters.",
)
@pass_ctx
def journal_append(ctx: Context, store: str, record: str | None, max_text_length: int) -> None:
    """Append turn records to STORE's journal.jsonl (rotated to journal-<time>.jsonl when full).

    Fields: at (default now), sessionId, channelId, status (completed|failed), title,
    userMessage, result, usage. Each record is appended whole or not at all.
    """
    from mnemofs.journal import StoreJournal, make_record

    backend = StoreJournal(ctx.service, ctx.store(store), actor="cli")
    texts = [record] if record is not None else [line for line in sys.stdin if line.strip()]
    records = []  # all checked before the first is appended: a bad line appends nothing
    for number, text in enumerate(texts, 1):
        try:
            parsed = json.loads(text)
            records.append(make_record(parsed, max_text_length=max_text_length))
        except ValueError as exc:
            raise errors.InvalidRequest(f"record {number} is not valid JSON: {exc}") from None
        except errors.InvalidRequest as exc:
            raise errors.InvalidRequest(f"record {number}: {exc.message}") from None
    appended = [backend.append(r) for r in records]
    last = appended[-1] if appended else None
    emit(
        ctx,
        {"appended": len(appended), "path": last.path if last else None},
        lambda: click.echo(
            f"appended {len(appended)} record(s)" + (f" to {last.path}" if last else "")
        ),
    )
