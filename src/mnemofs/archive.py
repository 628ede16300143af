"""The export file: one store as JSON Lines, optionally gzip-compressed (issue 18).

``docs/export-format.md`` is the format's documentation; this module is its one reader and
writer. A file is a header line, the store's records (``mnemofs.store.records``) one per line
in import order, and an end line that counts them: a file cut short lacks its end line, so a
truncated export is never taken for a smaller store. Reading checks every line as it goes and
names the line of the first problem; the import around it (one transaction) then keeps nothing.

Compression follows the file name when writing (``.gz``) and the file's first bytes when
reading, so a renamed file still reads.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any, cast

from mnemofs.errors import InvalidRequest
from mnemofs.store import MemoryService
from mnemofs.store.records import (
    DirectoryRecord,
    MemoryRecord,
    Record,
    StoreRecord,
    VersionRecord,
)

FORMAT = "mnemofs-store-export"
FORMAT_VERSION = 1
# No record comes near this (content is at most 100 KiB, 600 KiB JSON-escaped): a longer line
# is not read into memory whole.
MAX_LINE_BYTES = 4 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"

_KINDS: dict[str, type[Any]] = {
    "store": StoreRecord,
    "directory": DirectoryRecord,
    "version": VersionRecord,
    "memory": MemoryRecord,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}
_COUNTED = {"directory": "directories", "version": "versions", "memory": "memories"}


class BadExport(InvalidRequest):
    """A file that is not a readable export; the message names the line."""


def _mnemofs_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # ~20 ms: only when exporting

    try:
        return version("mnemofs")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def write_export(
    service: MemoryService,
    store_id: str,
    out: IO[bytes],
    *,
    heads_only: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Write the store's export to ``out``; return how many records of each kind.
    ``progress`` hears how many records are written, now and then."""
    out.write(
        _line(
            {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                "heads_only": heads_only,
                "mnemofs": _mnemofs_version(),
            }
        )
    )

    written = 0

    def emit(record: Record) -> None:
        nonlocal written
        fields = dataclasses.asdict(record)
        del fields["line"]
        out.write(_line({"record": _NAMES[type(record)], **fields}))
        written += 1
        if progress is not None and written % 256 == 0:
            progress(written)

    counts = service.export_store(store_id, emit, heads_only=heads_only)
    if progress is not None:
        progress(written)
    out.write(_line({"record": "end", **counts}))
    return counts


@contextmanager
def open_for_writing(path: str) -> Iterator[IO[bytes]]:
    """A file made owner-only, gzip-compressed when its name ends in ``.gz``."""
    import os

    if path.endswith((".zst", ".xz", ".bz2", ".lz4")):
        raise BadExport(
            f"{path}: only gzip compression is written (name the file .gz, or leave it plain)"
        )

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as packed:
                yield cast(IO[bytes], packed)
        else:
            yield raw


def reader(
    path: str, name: str | None = None, progress: Callable[[int], None] | None = None
) -> Callable[[], Iterator[Record]]:
    """What ``MemoryService.import_store`` takes: each call reads the file from its start.
    ``progress`` hears how many bytes of the file have been read, now and then."""

    def records() -> Iterator[Record]:
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed below, also when abandoned
        except OSError as exc:
            raise BadExport(f"cannot read {path}: {exc.strerror}") from None
        with raw:
            for n, record in enumerate(read_records(raw, name or path)):
                if progress is not None and n % 256 == 0:
                    progress(raw.tell())
                yield record
            if progress is not None:
                progress(raw.tell())

    return records


def read_records(raw: IO[bytes], name: str) -> Iterator[Record]:
    """The records of an export, checked line by line (gzip or not: the first bytes say)."""
    peek = getattr(raw, "peek", None)
    if peek is not None:
        head = peek(2)[:2]
    else:
        head = raw.read(2)
        raw.seek(0)
    stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if head == _GZIP_MAGIC else raw
    lines = _lines(stream, name)
    header = next(lines, None)
    if header is None:
        raise BadExport(f"{name} is empty: not a mnemofs export")
    _check_header(header[1], name)
    counts = dict.fromkeys(_COUNTED.values(), 0)
    for number, obj in lines:
        kind = obj.get("record")
        if kind == "end":
            _check_end(obj, counts, number, name)
            extra = next(lines, None)
            if extra is not None:
                raise BadExport(f"{name}: line {extra[0]}: more after the end record")
            return
        if kind not in _KINDS:
            raise BadExport(f"{name}: line {number}: unknown record {kind!r}")
        if kind in _COUNTED:
            counts[_COUNTED[kind]] += 1
        yield _record(_KINDS[kind], obj, number, name)
    raise BadExport(
        f"{name} ends without its end record: the file is truncated (an export was cut short)"
    )


def _lines(stream: IO[bytes], name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    number = 0
    while True:
        try:
            data = stream.readline(MAX_LINE_BYTES + 1)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise BadExport(
                f"{name}: after line {number}: the compressed file is truncated or corrupt ({exc})"
            ) from None
        if not data:
            return
        number += 1
        if len(data) > MAX_LINE_BYTES:
            raise BadExport(f"{name}: line {number} is longer than any record can be")
        try:
            obj = json.loads(data)
        except UnicodeDecodeError:
            raise BadExport(f"{name}: line {number} is not UTF-8") from None
        except ValueError as exc:
            raise BadExport(f"{name}: line {number} is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise BadExport(f"{name}: line {number} is not a JSON object")
        yield number, obj


def _check_header(obj: dict[str, Any], name: str) -> None:
    if obj.get("format") != FORMAT:
        raise BadExport(f"{name}: line 1 is not a mnemofs export header (format {FORMAT!r})")
    found = obj.get("version")
    if not isinstance(found, int) or found < 1:
        raise BadExport(f"{name}: line 1: format version {found!r} is not a version")
    if found > FORMAT_VERSION:
        raise BadExport(
            f"{name}: format version {found} is newer than this mnemofs reads "
            f"({FORMAT_VERSION}): import it with a newer mnemofs"
        )


def _check_end(obj: dict[str, Any], counts: dict[str, int], number: int, name: str) -> None:
    for key, found in counts.items():
        said = obj.get(key)
        if said != found:
            raise BadExport(
                f"{name}: line {number}: the end record counts {said!r} {key} but the file "
                f"holds {found} (lines lost or added?)"
            )


def _record(cls: type[Any], obj: dict[str, Any], number: int, name: str) -> Record:
    values: dict[str, Any] = {}
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "line"}
    unknown = set(obj) - set(fields) - {"record"}
    if unknown:
        raise BadExport(f"{name}: line {number}: unknown field {sorted(unknown)[0]!r}")
    for field_name, field in fields.items():
        if field_name not in obj:
            if field.default is not dataclasses.MISSING:
                continue
            raise BadExport(f"{name}: line {number}: {obj['record']} has no {field_name!r}")
        value = obj[field_name]
        if not _typed(value, str(field.type)):
            raise BadExport(
                f"{name}: line {number}: {field_name} has the wrong type ({value!r:.60})"
            )
        values[field_name] = value
    return cls(**values, line=number)  # type: ignore[no-any-return]


def _typed(value: object, annotation: str) -> bool:
    if value is None:
        return "None" in annotation
    if annotation.startswith("int"):
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation.startswith("dict"):
        return isinstance(value, dict)
    return isinstance(value, str)
