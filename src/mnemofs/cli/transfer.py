"""``mnemofs stores export|import``: a store to a file and back (issue 18)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from mnemofs import archive
from mnemofs.cli.common import Context, pass_ctx


@contextmanager
def progress(label: str, length: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal (click's), nothing otherwise; yields "we are at N"."""
    if not sys.stderr.isatty() or length <= 0:
        yield lambda at: None
        return
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        shown = 0

        def at(position: int) -> None:
            nonlocal shown
            bar.update(max(0, min(position, length) - shown))
            shown = max(shown, min(position, length))

        yield at


def summary(ctx: Context, obj: dict[str, object], line: str) -> None:
    click.echo(json.dumps(obj, indent=2) if ctx.as_json else line)


@click.command("export")
@click.argument("store")
@click.option(
    "--out",
    metavar="FILE",
    help="Where to write (made owner-only; .gz compresses). Default: standard output.",
)
@click.option(
    "--heads-only", is_flag=True, help="Only each memory's current content, no past versions."
)
@pass_ctx
def store_export(ctx: Context, store: str, out: str | None, heads_only: bool) -> None:
    """Write STORE with every version (or only its heads) to one file.

    The format is documented in docs/export-format.md; `mnemofs stores import` reads it back.
    """
    service = ctx.service
    store_id = ctx.store(store)
    if out is None or out == "-":
        counts = archive.write_export(service, store_id, sys.stdout.buffer, heads_only=heads_only)
        sys.stdout.buffer.flush()
    else:
        total = service.export_size(store_id, heads_only=heads_only) if sys.stderr.isatty() else 0
        with progress("exporting", total) as at, archive.open_for_writing(out) as stream:
            counts = archive.write_export(
                service, store_id, stream, heads_only=heads_only, progress=at
            )
    where = out if out not in (None, "-") else "standard output"
    line = (
        f"exported {store_id}: {counts['memories']} memories, {counts['versions']} versions, "
        f"{counts['directories']} directories to {where}"
    )
    if out in (None, "-"):
        click.echo(line, err=True)  # the export itself is on standard output
    else:
        summary(ctx, {"memory_store_id": store_id, "file": out, **counts}, line)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--name", help="The new store's name (default: the exported store's).")
@click.option(
    "--keep-ids",
    is_flag=True,
    help="Keep the store's, memories' and versions' ids (refused if one exists here).",
)
@pass_ctx
def store_import(ctx: Context, file: str, name: str | None, keep_ids: bool) -> None:
    """Make a new store from an export FILE, with its whole history, in one transaction.

    A file that is truncated, corrupt, from a newer mnemofs or breaks a rule is refused with
    the line at fault, and nothing is imported.
    """
    ctx.may_create = True
    try:
        size = os.stat(file).st_size
    except OSError as exc:
        raise click.UsageError(f"cannot read {file!r}: {exc.strerror}") from None
    with progress("importing", size) as at:
        store = ctx.service.import_store(
            archive.reader(file, progress=at), name=name, keep_ids=keep_ids
        )
    summary(
        ctx,
        store.to_dict(),
        f"imported {file} as {store.id} ({store.name!r}): {store.memory_count} memories",
    )
