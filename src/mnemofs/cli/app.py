"""The ``mnemofs`` command: thin commands over ``MemoryService``, one call each.

Output is a readable table, or with ``--json`` the spec's objects. Errors are one line on stderr
and an exit code per error type (see ``EXIT_CODES``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import yaml

from mnemofs import errors
from mnemofs.limits import (
    DEFAULT_KEEP_VERSIONS,
    DEFAULT_MOUNT_ROOT,
    DEFAULT_RETENTION_DAYS,
    MAX_PAGE_LIMIT,
)
from mnemofs.models import MEMORY_PREFIX, Memory, MemoryStore, MemoryVersion, Page, Session
from mnemofs.store import MemoryService, decode_content, make_engine, prompt_note, upgrade
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
    next_cursor = page.next_cursor if one_page else None

    def table() -> None:
        print_table(headers, [row(e) for e in entries])
        if next_cursor:
            click.echo(f"next cursor: {next_cursor}", err=True)

    emit(ctx, {"data": [e.to_dict() for e in entries], "next_cursor": next_cursor}, table)


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


# -- the groups -------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", metavar="URL", help="Database URL or SQLite file (default: $MNEMOFS_DB, "
              "else the XDG data directory).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON objects instead of tables.")
@click.version_option(package_name="mnemofs")
@click.pass_context
def cli(click_ctx: click.Context, db: str | None, as_json: bool) -> None:
    """mnemofs: durable, versioned memory for AI agents, served as plain files.

    STORE is a memstore_ id or an exact store name; MEMORY is a mem_ id or a path.
    """
    click_ctx.obj = Context(db, as_json)


@cli.group()
def stores() -> None:
    """Create, inspect, rename, archive and delete memory stores."""


@cli.group()
def memories() -> None:
    """Create, read, list, update and delete the memories in a store."""


@cli.group()
def versions() -> None:
    """Audit, redact and prune the immutable versions of a store's memories."""


@cli.group()
def sessions() -> None:
    """Create sessions that attach stores, show their prompt note, end them."""


@cli.group()
def journal() -> None:
    """Append agent turns to a journal store (one JSON line per turn)."""


@cli.group()
def db() -> None:
    """Manage the database itself."""


# -- stores -----------------------------------------------------------------------------------


def show_store(ctx: Context, store: MemoryStore) -> None:
    emit(ctx, store, lambda: print_fields([
        ("id", store.id), ("name", store.name), ("description", store.description),
        ("kind", store.kind), ("owner", store.owner), ("on_full", store.on_full),
        ("secrets", store.secrets), ("memories", store.memory_count),
        ("created_at", store.created_at), ("updated_at", store.updated_at),
        ("archived_at", store.archived_at),
    ]))  # fmt: skip


@stores.command("create")
@click.argument("name")
@click.option("--description", default="", help="Shown to the agent: what the store holds.")
@click.option("--kind", type=click.Choice(["memory", "journal"]), default="memory",
              show_default=True, help="journal: a turn journal, attached read_only.")  # fmt: skip
@click.option("--owner", metavar="USER_ID", default="",
              help="The end user the store belongs to (default: a general store).")  # fmt: skip
@click.option("--on-full", type=click.Choice(["refuse", "evict-lru"]), default="refuse",
              show_default=True,
              help="When full: refuse a create, or evict the least recently read.")  # fmt: skip
@click.option("--secrets", type=click.Choice(["refuse", "allow"]), default="refuse",
              show_default=True,
              help="refuse: a save holding a credential (a cloud key, a private key, a "
                   "token, a URL with a password) is refused, naming kind and line.")  # fmt: skip
@pass_ctx
def stores_create(
    ctx: Context, name: str, description: str, kind: Any, owner: str, on_full: Any, secrets: Any
) -> None:
    """Create a store named NAME."""
    ctx.may_create = True
    store = ctx.service.create_store(name, description, kind=kind, owner=owner, on_full=on_full,
                                     secrets=secrets)  # fmt: skip
    show_store(ctx, store)


@stores.command("list")
@click.option("--include-archived", is_flag=True, help="Also list archived stores.")
@pass_ctx
def stores_list(ctx: Context, include_archived: bool) -> None:
    """List stores (archived ones only with --include-archived)."""
    found = list(ctx.service.list_stores(include_archived=include_archived))
    emit(ctx, {"data": [s.to_dict() for s in found]}, lambda: print_table(
        ["ID", "NAME", "MEMORIES", "CREATED", "ARCHIVED"],
        [(s.id, s.name, s.memory_count, s.created_at, s.archived_at or "") for s in found],
    ))  # fmt: skip


@stores.command("show")
@click.argument("store")
@pass_ctx
def stores_show(ctx: Context, store: str) -> None:
    """Show one store."""
    show_store(ctx, ctx.service.get_store(ctx.store(store)))


@stores.command("update")
@click.argument("store")
@click.option("--name", help="The new name.")
@click.option("--description", help="The new description.")
@click.option("--on-full", type=click.Choice(["refuse", "evict-lru"]),
              help="What a create does when the store is full.")  # fmt: skip
@click.option("--secrets", type=click.Choice(["refuse", "allow"]),
              help="Whether a save holding a credential is refused.")  # fmt: skip
@pass_ctx
def stores_update(
    ctx: Context, store: str, name: str | None, description: str | None, on_full: Any,
    secrets: Any,
) -> None:  # fmt: skip
    """Rename a store, change its description, its capacity or its secrets policy."""
    store_id = ctx.store(store)
    show_store(ctx, ctx.service.update_store(store_id, name=name, description=description,
                                             on_full=on_full, secrets=secrets))  # fmt: skip


@stores.command("archive")
@click.argument("store")
@pass_ctx
def stores_archive(ctx: Context, store: str) -> None:
    """Archive a store: read-only forever, never attached to new sessions."""
    show_store(ctx, ctx.service.archive_store(ctx.store(store)))


@stores.command("delete")
@click.argument("store")
@click.option("--yes", is_flag=True, help="Confirm: every memory and version goes with it.")
@pass_ctx
def stores_delete(ctx: Context, store: str, yes: bool) -> None:
    """Delete a store with all its memories and versions."""
    if not yes:
        raise click.UsageError("deleting a store removes all its memories and versions: add --yes")
    store_id = ctx.store(store)
    ctx.service.delete_store(store_id)
    emit(ctx, {"id": store_id, "deleted": True}, lambda: click.echo(f"deleted {store_id}"))


# -- memories ---------------------------------------------------------------------------------


def show_memory(ctx: Context, memory: Memory) -> None:
    def table() -> None:
        print_fields([
            ("id", memory.id), ("path", memory.path), ("size_bytes", memory.size_bytes),
            ("content_sha256", memory.content_sha256), ("version_id", memory.version_id),
            ("created_at", memory.created_at), ("updated_at", memory.updated_at),
        ])  # fmt: skip
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
@click.option("--depth", type=int, default=0, show_default=True,
              help="0: the whole subtree; 1: immediate children and directories.")  # fmt: skip
@click.option("--limit", type=int, help="One page of this many entries (default: all).")
@click.option("--cursor", help="Continue after the page that printed this cursor.")
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
    emit_listing(ctx, page, one_page=limit is not None,
                 headers=["TYPE", "PATH", "SIZE", "SHA256", "UPDATED", "ID"],
                 row=lambda e: (e.type, e.path, e.size_bytes, e.content_sha256[:12],
                                e.updated_at, e.id)
                 if isinstance(e, Memory) else (e.type, e.path, "", "", "", ""))  # fmt: skip


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
@click.option("--if-sha256", metavar="H",
              help="Apply only while the stored content's SHA-256 is still H.")  # fmt: skip
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
    show_memory(ctx, ctx.service.update_memory(
        store_id, ctx.memory(store_id, memory), content=text, path=new_path,
        precondition=precondition,
    ))  # fmt: skip


@memories.command("delete")
@click.argument("store")
@click.argument("memory")
@pass_ctx
def memories_delete(ctx: Context, store: str, memory: str) -> None:
    """Delete a memory (its versions stay)."""
    store_id = ctx.store(store)
    version = ctx.service.delete_memory(store_id, ctx.memory(store_id, memory))
    emit(ctx, version, lambda: click.echo(f"deleted {version.path} ({version.id})"))


# -- versions ---------------------------------------------------------------------------------


def show_version(ctx: Context, version: MemoryVersion) -> None:
    def table() -> None:
        print_fields([
            ("id", version.id), ("memory_id", version.memory_id),
            ("operation", version.operation), ("path", version.path),
            ("size_bytes", version.size_bytes), ("content_sha256", version.content_sha256),
            ("actor", version.actor), ("created_at", version.created_at),
            ("redacted_at", version.redacted_at),
        ])  # fmt: skip
        if version.content is not None:
            click.echo("")
            click.echo(version.content, nl=not version.content.endswith("\n"))

    emit(ctx, version, table)


@versions.command("list")
@click.argument("store")
@click.option("--memory", help="Only this memory's versions (a mem_ id, or a live path).")
@click.option("--limit", type=int, help="One page of this many versions (default: all).")
@click.option("--cursor", help="Continue after the page that printed this cursor.")
@pass_ctx
def versions_list(
    ctx: Context, store: str, memory: str | None, limit: int | None, cursor: str | None
) -> None:
    """List versions, newest first, without content."""
    store_id = ctx.store(store)
    memory_id = ctx.memory(store_id, memory) if memory else None
    page = ctx.service.list_versions(
        store_id,
        memory_id=memory_id,
        limit=MAX_PAGE_LIMIT if limit is None else limit,
        cursor=cursor,
    )
    emit_listing(ctx, page, one_page=limit is not None,
                 headers=["ID", "OPERATION", "PATH", "SIZE", "ACTOR", "CREATED", "REDACTED"],
                 row=lambda v: (v.id, v.operation, v.path, v.size_bytes, v.actor, v.created_at,
                                v.redacted_at or ""))  # fmt: skip


@versions.command("show")
@click.argument("store")
@click.argument("version")
@pass_ctx
def versions_show(ctx: Context, store: str, version: str) -> None:
    """Show a version with its content."""
    show_version(ctx, ctx.service.get_version(ctx.store(store), version))


@versions.command("redact")
@click.argument("store")
@click.argument("version")
@pass_ctx
def versions_redact(ctx: Context, store: str, version: str) -> None:
    """Clear a version's content, keeping who, what and when."""
    show_version(ctx, ctx.service.redact_version(ctx.store(store), version))


@versions.command("prune")
@click.argument("store")
@click.option("--older-than-days", type=float, default=DEFAULT_RETENTION_DAYS, show_default=True,
              help="Remove versions older than this many days...")  # fmt: skip
@click.option("--keep-last", type=int, default=DEFAULT_KEEP_VERSIONS, show_default=True,
              help="...except the newest this many of each live memory.")  # fmt: skip
@pass_ctx
def versions_prune(ctx: Context, store: str, older_than_days: float, keep_last: int) -> None:
    """Remove old versions, always keeping each live memory's newest ones."""
    removed = ctx.service.prune_versions(
        ctx.store(store), older_than_days=older_than_days, keep_last=keep_last
    )
    emit(ctx, {"pruned": removed}, lambda: click.echo(f"pruned {removed} version(s)"))


# -- sessions ---------------------------------------------------------------------------------


def parse_attach(ctx: Context, value: str) -> dict[str, str]:
    """``STORE[:read_only|:read_write]``; a name may itself contain ':'. Without a mode the
    store's default applies (read_write; read_only for a journal)."""
    ref, _, mode = value.rpartition(":")
    if ref and mode in ("read_only", "read_write"):
        return {"type": "memory_store", "memory_store_id": ctx.store(ref), "access": mode}
    return {"type": "memory_store", "memory_store_id": ctx.store(value)}


def load_spec(ctx: Context, file: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
        loaded = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"cannot read --spec {file!r}: {exc}") from None
    if isinstance(loaded, dict) and "resources" in loaded:
        loaded = loaded["resources"]
    if not isinstance(loaded, list):
        raise errors.InvalidRequest(f"--spec {file!r} must hold a list of attachments")
    resources = []
    for item in loaded:
        if isinstance(item, dict) and isinstance(item.get("memory_store_id"), str):
            item = {**item, "memory_store_id": ctx.store(item["memory_store_id"])}
        resources.append(item)
    return resources


def show_session(ctx: Context, session: Session) -> None:
    def table() -> None:
        print_fields([
            ("id", session.id), ("created_at", session.created_at),
            ("ended_at", session.ended_at), ("mount_root", session.mount_root),
            ("user_id", session.user_id),
        ])  # fmt: skip
        click.echo("")
        print_table(["STORE", "NAME", "ACCESS", "MOUNT PATH"], [
            (a.memory_store_id, a.name, a.access, a.mount_path) for a in session.resources
        ])  # fmt: skip

    emit(ctx, session, table)


@sessions.command("create")
@click.option("--attach", "attach", multiple=True, metavar="STORE[:MODE]",
              help="Attach STORE read_write (default) or read_only; repeat for more.")  # fmt: skip
@click.option("--spec", metavar="FILE",
              help="JSON or YAML list of attachments: type, memory_store_id, access, "
              "instructions ('-' for stdin).")  # fmt: skip
@click.option("--root", default=DEFAULT_MOUNT_ROOT, show_default=True,
              help="Where the session's stores are mounted.")  # fmt: skip
@click.option("--user", "user", metavar="USER_ID",
              help="Act for this end user: general stores and the user's only (all of them, "
              "when nothing is attached explicitly).")  # fmt: skip
@pass_ctx
def sessions_create(
    ctx: Context, attach: tuple[str, ...], spec: str | None, root: str, user: str | None
) -> None:
    """Create a session with its attached stores (fixed for its lifetime)."""
    resources = [parse_attach(ctx, a) for a in attach]
    if spec:
        resources += load_spec(ctx, spec)
    show_session(ctx, ctx.service.create_session(resources, mount_root=root, user=user))


@sessions.command("show")
@click.argument("session")
@pass_ctx
def sessions_show(ctx: Context, session: str) -> None:
    """Show a session and where each store is mounted."""
    show_session(ctx, ctx.service.get_session(session))


@sessions.command("prompt")
@click.argument("session")
@pass_ctx
def sessions_prompt(ctx: Context, session: str) -> None:
    """Print the prompt note to add to the agent's system prompt."""
    note = prompt_note(ctx.service.get_session(session))
    emit(ctx, {"session_id": session, "prompt": note}, lambda: click.echo(note, nl=False))


@sessions.command("end")
@click.argument("session")
@pass_ctx
def sessions_end(ctx: Context, session: str) -> None:
    """End a session."""
    show_session(ctx, ctx.service.end_session(session))


# -- mount ------------------------------------------------------------------------------------


@cli.command("mount")
@click.option("--session", "session_id", metavar="SESSION", help="Mount this session's stores.")
@click.option("--attach", "attach", multiple=True, metavar="STORE[:MODE]",
              help="Create a session attaching STORE (read_write); repeatable.")  # fmt: skip
@click.option("--root", metavar="DIR",
              help=f"Mount point (default: the session's, else {DEFAULT_MOUNT_ROOT}).")  # fmt: skip
@click.option("--foreground", is_flag=True, help="Serve in this process until SIGINT/SIGTERM.")
@click.option("--allow-other", is_flag=True, help="Let other users (a sandbox's) use the mount.")
@click.option("--uid", type=int, help="Owner shown for every file (default: this user).")
@click.option("--gid", type=int, help="Group shown for every file (default: this group).")
@click.option("--group-access", is_flag=True,
              help="Members of --gid may read and write too (modes 0660/0770); without it the "
                   "mount is owner-only (0600/0700) and others get EACCES.")  # fmt: skip
@click.option("--debug", is_flag=True, help="Log every FUSE request.")
@click.option("--ready-fd", type=int, hidden=True)
@pass_ctx
def mount(
    ctx: Context,
    session_id: str | None,
    attach: tuple[str, ...],
    root: str | None,
    foreground: bool,
    allow_other: bool,
    uid: int | None,
    gid: int | None,
    group_access: bool,
    debug: bool,
    ready_fd: int | None,
) -> None:
    """Mount a session's stores as directories under ROOT (one per store).

    Returns once the mount is ready (or, with --foreground, prints one line then and serves).
    """
    from mnemofs.cli import daemon

    if bool(session_id) == bool(attach):
        raise click.UsageError("give --session SESSION or --attach STORE[:MODE] ...")
    if session_id:
        session = ctx.service.get_session(session_id)
        root = root or session.mount_root
    else:
        root = root or DEFAULT_MOUNT_ROOT
        session = ctx.service.create_session(
            [parse_attach(ctx, a) for a in attach], mount_root=os.path.abspath(root)
        )
        click.echo(session.id)
    root = os.path.abspath(root)
    options = daemon.MountOptions(root, allow_other, uid, gid, debug, group_access)
    if foreground:
        daemon.serve_foreground(ctx.service, session, options, ready_fd=ready_fd)
    else:
        daemon.start_background(ctx.db, session, options)


@cli.command("sync")
@click.option("--session", "session_id", metavar="SESSION", help="Sync this session's stores.")
@click.option("--attach", "attach", multiple=True, metavar="STORE[:MODE]",
              help="Create a session attaching STORE (repeat), print its id, sync it.")  # fmt: skip
@click.option("--root", metavar="DIR",
              help="Where the stores' folders go (default: the session's mount root).")  # fmt: skip
@click.option("--interval", type=float, default=15.0, show_default=True,
              help="Seconds between reconciles (at least 1).")  # fmt: skip
@click.option("--once", is_flag=True, help="Reconcile once and exit (for hooks and cron).")
@click.option("--foreground", is_flag=True, help="Stay in the foreground until SIGINT/SIGTERM.")
@pass_ctx
def sync(ctx: Context, session_id: str | None, attach: tuple[str, ...], root: str | None,
         interval: float, once: bool, foreground: bool) -> None:  # fmt: skip
    """Keep a local folder per attached store in step with the database (no FUSE needed).

    Reconciles at most every --interval seconds and once more on SIGINT/SIGTERM. Without
    --foreground or --once, the first reconcile runs here and a background worker continues.
    """
    from mnemofs.cli import syncing

    if bool(session_id) == bool(attach):
        raise click.UsageError("give --session SESSION or --attach STORE[:MODE] ...")
    if interval < 1:
        raise click.UsageError(f"--interval must be at least 1 second, got {interval}")
    if session_id:
        session = ctx.service.get_session(session_id)
    else:
        session = ctx.service.create_session(
            [parse_attach(ctx, a) for a in attach],
            mount_root=os.path.abspath(root or DEFAULT_MOUNT_ROOT),
        )
        click.echo(session.id)
    folder = os.path.abspath(root or session.mount_root)
    syncing.run(ctx.db, session, folder, interval, once=once, foreground=foreground)


@cli.command("umount")
@click.option("--root", default=DEFAULT_MOUNT_ROOT, show_default=True, metavar="DIR",
              help="The mount point to unmount.")  # fmt: skip
@pass_ctx
def umount(ctx: Context, root: str) -> None:
    """Unmount ROOT: the daemon saves open files, unmounts and exits."""
    from mnemofs.cli import daemon

    daemon.stop(os.path.abspath(root))
    click.echo(f"unmounted {os.path.abspath(root)}")


# -- recall -----------------------------------------------------------------------------------


@cli.command("context")
@click.argument("session")
@click.option("--max-words", type=int, default=4000, show_default=True,
              help="At most this many words of memory content.")  # fmt: skip
@pass_ctx
def context_command(ctx: Context, session: str, max_words: int) -> None:
    """Print the text to inject into SESSION's next turn: its newest memories, newest first."""
    text = ctx.service.context(session, max_words=max_words)
    emit(ctx, {"session": session, "context": text}, lambda: click.echo(text, nl=False))


@cli.command("search")
@click.argument("store")
@click.argument("query")
@click.option("--limit", type=int, default=10, show_default=True, help="At most this many hits.")
@pass_ctx
def search_command(ctx: Context, store: str, query: str, limit: int) -> None:
    """Find STORE's live memories holding every word of QUERY, best first, with a snippet."""
    hits = ctx.service.search(ctx.store(store), query, limit=limit)
    emit(ctx, {"data": [h.to_dict() for h in hits]},
         lambda: print_table(["PATH", "SNIPPET"],
                             [(h.path, " ".join(h.snippet.split())) for h in hits]))  # fmt: skip


# -- journal ----------------------------------------------------------------------------------


@journal.command("append")
@click.argument("store")
@click.option("--record", metavar="JSON", help="One record (else JSON lines from stdin).")
@click.option("--max-text-length", type=int, default=2000, show_default=True,
              help="Truncate userMessage, result and title to this many characters.")  # fmt: skip
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
    emit(ctx, {"appended": len(appended), "path": last.path if last else None},
         lambda: click.echo(f"appended {len(appended)} record(s)"
                            + (f" to {last.path}" if last else "")))  # fmt: skip


# -- db ---------------------------------------------------------------------------------------


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
    emit(ctx, {"data": [f.to_dict() for f in found]}, lambda: print_table(
        ["STORE", "MEMORY", "VERSION", "PATH", "LINE", "KIND"],
        [(f.memory_store_id, f.memory_id, f.version_id, f.path, f.line, f.kind) for f in found],
    ))  # fmt: skip
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
    summary = (f"{report.stores} stores, {report.memories} memories, "
               f"{report.versions} versions checked")  # fmt: skip

    def table() -> None:
        for problem in report.problems:
            click.echo(problem)
        click.echo(f"{'ok' if report.ok else f'{len(report.problems)} problems'}: {summary}")

    emit(ctx, {"ok": report.ok, "stores": report.stores, "memories": report.memories,
               "versions": report.versions, "problems": report.problems}, table)  # fmt: skip
    if not report.ok:
        sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: run the CLI, turning domain errors into one line and an exit code."""
    try:
        result = cli.main(args=argv, prog_name="mnemofs", standalone_mode=False)
    except errors.MnemofsError as error:
        fail(error)
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
