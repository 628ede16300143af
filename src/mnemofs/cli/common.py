"""What every command shares: the context (options before the group, the service made on
demand), output as a table or JSON, errors as one line and an exit code, content input,
and the "--session or --attach" choice of mount and sync."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from mnemofs import errors
from mnemofs.models import MEMORY_PREFIX, Actor, Page
from mnemofs.store import MemoryService, decode_content, make_engine
from mnemofs.store.engine import is_default_location

EXIT_CODES: dict[type[errors.MnemofsError], int] = {
    errors.InvalidRequest: 2,
    errors.NotFound: 3,
    errors.Conflict: 4,
    errors.PreconditionFailed: 4,
    errors.LimitExceeded: 5,
    errors.StoreArchived: 6,
}

F = TypeVar("F", bound=Callable[..., Any])


class Context:
    """What every command gets: the options before the group, and the service made on demand."""

    def __init__(self, db: str | None, as_json: bool) -> None:
        self.db = db
        self.as_json = as_json
        # A new database is made only where the user plainly asked for one: the default
        # location, or a command that can succeed on an empty one (``stores create``).
        self.may_create = is_default_location(db)
        self._service: MemoryService | None = None

    @property
    def service(self) -> MemoryService:
        if self._service is None:
            engine = make_engine(self.db, create=self.may_create)
            self._service = MemoryService(engine, actor="cli")
        return self._service

    def store(self, ref: str) -> str:
        return self.service.resolve_store(ref)

    def memory(self, store_id: str, ref: str) -> str:
        """A memory id from a ``mem_`` id or a path."""
        if ref.startswith(MEMORY_PREFIX):
            return ref
        return self.service.find_memory(store_id, ref).id


pass_ctx = click.make_pass_decorator(Context)


def fail(error: errors.MnemofsError) -> NoReturn:
    code = next((c for t, c in EXIT_CODES.items() if isinstance(error, t)), 1)
    click.echo(f"mnemofs: {error.type}: {error.message}", err=True)
    sys.exit(code)


def emit(ctx: Context, obj: Any, table: Callable[[], None]) -> None:
    if ctx.as_json:
        click.echo(json.dumps(obj.to_dict() if hasattr(obj, "to_dict") else obj, indent=2))
    else:
        table()


def emit_listing(
    ctx: Context,
    page: Page[Any],
    *,
    one_page: bool,
    headers: Sequence[str],
    row: Callable[[Any], Sequence[Any]],
) -> None:
    """A listing: one page and its next cursor (on stderr in table mode), or every page."""
    entries = page.data if one_page else list(page)
    next_page = page.next_page if one_page else None

    def table() -> None:
        print_table(headers, [row(e) for e in entries])
        if next_page:
            click.echo(f"next page: {next_page}", err=True)

    emit(ctx, {"data": [e.to_dict() for e in entries], "next_page": next_page}, table)


def actor_text(actor: Actor | None) -> str:
    """An actor in one word for tables: ``session:sess_...``, ``key:apikey_...``, ``cli``."""
    if actor is None:
        return ""
    prefix = {"session_actor": "session:", "api_actor": "key:", "user_actor": "user:"}
    return prefix.get(actor.type, "") + actor.id


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_fields(pairs: Iterable[tuple[str, Any]]) -> None:
    pairs = list(pairs)
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {'' if value is None else value}")


def read_content(content: str | None, file: str | None, *, stdin_default: bool) -> str | None:
    """Content from ``--content``, ``--file`` (``-`` is stdin), or stdin when neither is given."""
    if content is not None and file is not None:
        raise click.UsageError("give --content or --file, not both")
    if content is not None:
        return content
    if file == "-" or (file is None and stdin_default):
        return decode_content(sys.stdin.buffer.read())
    if file is not None:
        try:
            return decode_content(Path(file).read_bytes())
        except OSError as exc:
            raise click.UsageError(f"cannot read --file {file!r}: {exc.strerror}") from None
    return None


def parse_attach(ctx: Context, value: str) -> dict[str, str]:
    """``STORE[:read_only|:read_write]``; a name may itself contain ':'. Without a mode the
    store's default applies (read_write; read_only for a journal)."""
    ref, _, mode = value.rpartition(":")
    if ref and mode in ("read_only", "read_write"):
        return {"type": "memory_store", "memory_store_id": ctx.store(ref), "access": mode}
    return {"type": "memory_store", "memory_store_id": ctx.store(value)}
