"""``mnemofs db``: the database itself (upgrade, check, scrub, scan for secrets)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from mnemofs.cli.common import (
    Context,
    emit,
    pass_ctx,
    print_table,
)
from mnemofs.store import MemoryService, make_engine, upgrade


@click.group()
def db() -> None:
    """Manage the database itself."""


@db.command("upgrade")
@pass_ctx
def db_upgrade(ctx: Context) -> None:
    """Bring the database schema up to this version of mnemofs."""
    engine = make_engine(ctx.db, check_schema=False)
    upgrade(engine)
    engine.dispose()
    emit(ctx, {"upgraded": True}, lambda: click.echo("database schema is up to date"))


@db.command("scrub")
@pass_ctx
def db_scrub(ctx: Context) -> None:
    """Rewrite the database so no erased text stays in its files.

    Redaction, prune and store delete already erase on SQLite as they return. On PostgreSQL the
    old rows stay in the table files as dead tuples until this (VACUUM FULL, CHECKPOINT) runs;
    it locks those tables while it works.
    """
    ctx.service.scrub()
    emit(ctx, {"scrubbed": True}, lambda: click.echo("database scrubbed"))


@db.command("scan-secrets")
@click.option("--store", metavar="STORE", help="Scan only this store.")
@pass_ctx
def db_scan_secrets(ctx: Context, store: str | None) -> None:
    """Report credentials already stored: the kind, the memory, the version and the line of
    each, never the credential itself. Exit 1 if any is found."""
    found = ctx.service.scan_secrets(ctx.store(store) if store else None)
    emit(
        ctx,
        {"data": [f.to_dict() for f in found]},
        lambda: print_table(
            ["STORE", "MEMORY", "VERSION", "PATH", "LINE", "KIND"],
            [
                (f.memory_store_id, f.memory_id, f.memory_version_id, f.path, f.line, f.kind)
                for f in found
            ],
        ),
    )
    if found:
        sys.exit(1)


@db.command("check")
@click.option("--store", metavar="STORE", help="Check only this store.")
@pass_ctx
def db_check(ctx: Context, store: str | None) -> None:
    """Check the database against mnemofs' rules (read-only); exit 1 on any problem.

    Counts, heads, hashes and sizes of every memory and version, and on SQLite the file's own
    integrity_check. Run it after a crash or a hand edit.
    """
    report = ctx.service.check(ctx.store(store) if store else None)
    summary = (
        f"{report.stores} stores, {report.memories} memories, {report.versions} versions checked"
    )

    def table() -> None:
        for problem in report.problems:
            click.echo(problem)
        click.echo(f"{'ok' if report.ok else f'{len(report.problems)} problems'}: {summary}")

    emit(
        ctx,
        {
            "ok": report.ok,
            "stores": report.stores,
            "memories": report.memories,
            "versions": report.versions,
            "problems": report.problems,
        },
        table,
    )
    if not report.ok:
        sys.exit(1)


@db.command("copy")
@click.option("--to", "to_url", required=True, metavar="URL", help="The database to copy into.")
@click.option(
    "--from",
    "from_url",
    metavar="URL",
    help="The database to copy (default: --db, $MNEMOFS_DB, else the default SQLite file).",
)
@pass_ctx
def db_copy(ctx: Context, to_url: str, from_url: str | None) -> None:
    """Copy a whole workspace into another database: stores, memories, versions, sessions,
    tokens and keys, ids and all. SQLite to PostgreSQL is the move when one host is no longer
    enough.

    The source is read as one snapshot (stop mounts and servers first, or the saves made
    during the copy stay behind); the target is made and migrated if new. An interrupted copy
    is finished by running it again, without duplicates. At the end counts and hashes are
    compared and `db check` runs on the target.
    """
    from mnemofs.store.copy import copy_workspace

    source = MemoryService(make_engine(from_url or ctx.db, create=False), actor="cli")
    target = MemoryService(make_engine(to_url), actor="cli")
    try:
        with _table_progress() as progress:
            report = copy_workspace(source, target, progress)
    finally:
        source.close()
        target.close()
    rows = report.rows
    line = (
        f"copied {rows['memory_stores']} stores, {rows['memories']} memories, "
        f"{rows['memory_versions']} versions, {rows['sessions']} sessions, "
        f"{rows['api_keys']} API keys ({sum(report.copied.values())} rows new in the target); "
        "verified"
    )
    emit(
        ctx,
        {"rows": report.rows, "copied": report.copied, "verified": True},
        lambda: click.echo(line),
    )


@contextmanager
def _table_progress() -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar per table on a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        yield lambda table, done, total: None
        return
    bars: dict[str, Any] = {}

    def at(table: str, done: int, total: int) -> None:
        if table not in bars:
            for bar in bars.values():
                bar.render_finish()
            bars[table] = click.progressbar(length=max(total, 1), label=table, file=sys.stderr)
            bars[table].pos = 0
        bars[table].update(done - bars[table].pos)

    try:
        yield at
    finally:
        for bar in bars.values():
            bar.render_finish()
