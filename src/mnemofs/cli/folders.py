"""``mnemofs memories import|export``: a folder of notes into a store, and heads out to one
(issue 18). The folder is read and written through ``mnemofs.folder``: never through a
symbolic link, and what is written is owner-only."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator

import click

from mnemofs import limits
from mnemofs.cli.common import Context, pass_ctx
from mnemofs.cli.transfer import progress
from mnemofs.folder import Folder, LinkInPath
from mnemofs.models import Memory
from mnemofs.paths import as_prefix, validate_prefix
from mnemofs.store.folders import FileIn

VERDICTS = ("created", "modified", "unchanged", "skipped")


def _folder(directory: str) -> Folder:
    top, name = os.path.split(os.path.abspath(directory))
    return Folder(top or "/", name)


def folder_files(
    folder: Folder,
    prefix: str,
    *,
    include_hidden: bool,
    progress: Callable[[int], None] = lambda n: None,
) -> Iterator[FileIn]:
    """The folder's files as the store will see them, in path order, then its empty
    directories; what cannot be read comes with the reason. ``progress`` hears how many
    files were read."""
    dirs: list[str] = []
    hidden: list[str] | None = None if include_hidden else []
    found, refused = folder.scan(dirs=dirs, hidden=hidden)
    for path in refused:
        yield FileIn(prefix + path[1:], problem="a symbolic link or special file: not followed")
    for path in hidden or []:
        yield FileIn(
            prefix + path[1:], problem="hidden (its name starts with '.'): see --include-hidden"
        )
    for n, (path, st) in enumerate(sorted(found.items()), 1):
        progress(n)
        target = prefix + path[1:]
        try:
            target.encode()
        except UnicodeEncodeError:
            yield FileIn(ascii(target), problem="the file name is not UTF-8")
            continue
        if st.st_size > limits.MAX_CONTENT_BYTES:
            yield FileIn(
                target,
                problem=f"{st.st_size:,} bytes, over the limit of "
                f"{limits.MAX_CONTENT_BYTES:,} bytes per memory",
            )
            continue
        try:
            data = folder.read(path)
        except (LinkInPath, OSError) as exc:
            yield FileIn(target, problem=str(exc))
            continue
        if data is not None:
            yield FileIn(target, data)
    occupied = {p.rsplit("/", 1)[0] for p in [*found, *dirs]}
    for path in sorted(set(dirs) - occupied):
        yield FileIn(prefix + path[1:], directory=True)


@click.command("import")
@click.argument("store")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--prefix",
    default="/",
    show_default=True,
    metavar="/PATH/",
    help="Where in the store the folder's files go.",
)
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@click.option(
    "--include-hidden", is_flag=True, help="Also files and folders whose names start with '.'."
)
@pass_ctx
def memories_import(
    ctx: Context, store: str, directory: str, prefix: str, dry_run: bool, include_hidden: bool
) -> None:
    """Save every text file under DIRECTORY as a memory of STORE, in one transaction.

    A new file is one `created` version; a file whose memory already has that content is
    `unchanged`; a changed one is one `modified` version. A file the store would refuse
    (not UTF-8 text, over 100 KiB, a name the path rules refuse, the store full, a credential
    where the store refuses them, a link) is skipped and reported with the reason. Empty
    folders become directories. Run it again to bring the store up to date.
    """
    store_id = ctx.store(store)
    prefix = validate_prefix(as_prefix(prefix))
    folder = _folder(directory)
    if not folder.exists():
        raise click.UsageError(f"{directory!r} is not a directory (or is a symbolic link)")
    total = len(folder.scan(hidden=None if include_hidden else [])[0]) if sys.stderr.isatty() else 0
    with progress("importing", total) as at:
        outcomes = ctx.service.import_files(
            store_id,
            lambda: folder_files(folder, prefix, include_hidden=include_hidden, progress=at),
            dry_run=dry_run,
        )
    counts: Counter[str] = Counter(o.verdict for o in outcomes)
    if ctx.as_json:
        data = [{"path": o.path, "verdict": o.verdict, "reason": o.reason} for o in outcomes]
        summary = {v: counts[v] for v in VERDICTS}
        click.echo(json.dumps({"data": data, **summary, "dry_run": dry_run}, indent=2))
        return
    for o in outcomes:
        click.echo(f"{o.verdict:9} {o.path}" + (f": {o.reason}" if o.reason else ""))
    line = ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
    click.echo(line + (" (dry run: nothing was written)" if dry_run else ""))


@click.command("export")
@click.argument("store")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--path-prefix",
    default="/",
    show_default=True,
    metavar="/PATH/",
    help="Only memories under this directory (written relative to it).",
)
@pass_ctx
def memories_export(ctx: Context, store: str, directory: str, path_prefix: str) -> None:
    """Write each memory of STORE (its current content) as a plain file under DIRECTORY.

    Files are replaced whole (write, then rename) and made owner-only; files already in
    DIRECTORY that are not memories are left alone. Links in DIRECTORY are never followed.
    """
    store_id = ctx.store(store)
    prefix = validate_prefix(as_prefix(path_prefix))
    folder = _folder(directory)
    folder.ensure()
    page = ctx.service.list_memories(
        store_id, path_prefix=prefix, view="full", limit=limits.MAX_FULL_PAGE_LIMIT
    )
    total = ctx.service.get_store(store_id).memory_count
    written = 0
    refused: list[dict[str, str]] = []
    with progress("exporting", total) as at:
        for memory in page:
            assert isinstance(memory, Memory)
            try:
                folder.write("/" + memory.path[len(prefix) :], (memory.content or "").encode())
                written += 1
            except (LinkInPath, OSError) as exc:
                refused.append({"path": memory.path, "reason": str(exc)})
            at(written + len(refused))
    summary = {
        "memory_store_id": store_id,
        "directory": directory,
        "written": written,
        "skipped": refused,
    }
    if ctx.as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        for item in refused:
            click.echo(f"skipped   {item['path']}: {item['reason']}")
        click.echo(f"wrote {written} memories to {directory}, {len(refused)} skipped")
    if refused:
        raise SystemExit(1)
