"""``mnemofs serve``: the HTTP API."""

from __future__ import annotations

import click

from mnemofs.cli.common import Context, pass_ctx
from mnemofs.limits import SERVE_CONNECTIONS


@click.command("serve")
@click.option("--db", "db", metavar="URL", help="The database (also accepted before 'serve').")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes (each with its own database connections).",
)
@click.option(
    "--connections",
    default=SERVE_CONNECTIONS,
    show_default=True,
    type=click.IntRange(1, 256),
    help="PostgreSQL: database connections each process uses for requests, at most "
    "(more requests at once wait their turn).",
)
@pass_ctx
def serve_command(
    ctx: Context, db: str | None, host: str, port: int, workers: int, connections: int
) -> None:
    """Serve the memory stores API (API.md) until SIGTERM or SIGINT; requests in flight
    finish first. Admins use an API key ('mnemofs keys create'); a sandbox uses a session
    token ('mnemofs sessions token'). Logs are JSON lines on stderr."""
    try:
        from mnemofs.http.server import serve
    except ImportError as exc:
        raise click.ClickException(
            f"the server needs its extra: pip install 'mnemofs[server]' ({exc.name} is missing)"
        ) from None
    serve(db or ctx.db, host, port, workers, connections)
