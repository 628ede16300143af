"""The ``mnemofs`` command: thin commands over ``MemoryService``, one call each, one module per
command group (``stores``, ``memories``, ...; ``common`` holds what they share).

Output is a readable table, or with ``--json`` the spec's objects. Errors are one line on stderr
and an exit code per error type (see ``EXIT_CODES``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from mnemofs import errors
from mnemofs.cli.common import (
    Context,
    fail,
)
from mnemofs.cli.database import db
from mnemofs.cli.folders import memories_export, memories_import
from mnemofs.cli.history import store_fork, store_restore
from mnemofs.cli.journal import journal
from mnemofs.cli.keys import keys
from mnemofs.cli.memories import memories
from mnemofs.cli.mounting import mount, sync, umount
from mnemofs.cli.pools import pools
from mnemofs.cli.recall import context_command, search_command
from mnemofs.cli.serving import serve_command
from mnemofs.cli.sessions import sessions
from mnemofs.cli.stores import stores
from mnemofs.cli.transfer import store_export, store_import
from mnemofs.cli.versions import versions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    metavar="URL",
    help="Database URL or SQLite file (default: $MNEMOFS_DB, else the XDG data directory).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON objects instead of tables.")
@click.version_option(package_name="mnemofs")
@click.pass_context
def cli(click_ctx: click.Context, db: str | None, as_json: bool) -> None:
    """mnemofs: durable, versioned memory for AI agents, served as plain files.

    STORE is a memstore_ id or an exact store name; MEMORY is a mem_ id or a path.
    """
    click_ctx.obj = Context(db, as_json)


stores.add_command(store_export)
stores.add_command(store_import)
stores.add_command(store_restore)
stores.add_command(store_fork)
cli.add_command(stores)
memories.add_command(memories_import)
memories.add_command(memories_export)
cli.add_command(memories)
cli.add_command(versions)
cli.add_command(sessions)
cli.add_command(mount)
cli.add_command(sync)
cli.add_command(umount)
cli.add_command(context_command)
cli.add_command(search_command)
cli.add_command(journal)
cli.add_command(db)
cli.add_command(keys)
cli.add_command(pools)
cli.add_command(serve_command)


# What a package missing from this install is for, and what to do: a sandbox's image holds
# only what a mount or a sync worker needs to reach a server (the Dockerfile's sandbox target).
_MISSING = {
    **dict.fromkeys(
        ("sqlalchemy", "alembic", "slugify", "yaml", "detect_secrets"),
        "the database's packages are not installed here (a client-only install: mount and "
        "sync reach a server with $MNEMOFS_SERVER and $MNEMOFS_TOKEN); install mnemofs with "
        "its dependencies to use a database",
    ),
    **dict.fromkeys(("pyfuse3", "trio"), "mounting needs its extra: pip install 'mnemofs[fuse]'"),
    "psycopg": "PostgreSQL needs the driver: pip install 'mnemofs[postgres]'",
    **dict.fromkeys(
        ("fastapi", "starlette", "uvicorn"),
        "the server needs its extra: pip install 'mnemofs[server]'",
    ),
}


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: run the CLI, turning domain errors into one line and an exit code."""
    try:
        result = cli.main(args=argv, prog_name="mnemofs", standalone_mode=False)
    except errors.MnemofsError as error:
        fail(error)
    except ModuleNotFoundError as exc:
        what = _MISSING.get((exc.name or "").split(".")[0])
        if what is None:
            raise
        click.echo(f"mnemofs: {what} ({exc.name} is missing)", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("mnemofs: aborted", err=True)
        sys.exit(1)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "mnemofs"
        click.echo(f"mnemofs: usage: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"mnemofs: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(result if isinstance(result, int) else 0)
