"""Path and slug rules: pure functions, no I/O.

A memory path is absolute (``/notes/todo.md``), its segments separated by ``/``; no empty, ``.``
or ``..`` segment; no control or format character and no line or paragraph separator (U+2028,
U+2029); in Unicode Normalization Form C (the wire's rules: one spelling per name); at most
``MAX_PATH_SEGMENTS`` segments, each at most ``MAX_SEGMENT_BYTES`` and the whole path at most
``MAX_PATH_BYTES`` as UTF-8. A *prefix* names a directory and ends with ``/``
(``/`` itself is the store's root). Paths sort as strings, which for UTF-8 equals byte order.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from mnemofs.errors import InvalidName, InvalidRequest, NameTooLong
from mnemofs.limits import MAX_PATH_BYTES, MAX_PATH_SEGMENTS, MAX_SEGMENT_BYTES

ROOT = "/"

# Unicode categories no path may hold: control, format, surrogate, line and paragraph separator.
_REFUSED = {
    "Cc": "control",
    "Cf": "format",
    "Cs": "surrogate",
    "Zl": "separator",
    "Zp": "separator",
}


def _check_segments(text: str, what: str, segments: list[str]) -> None:
    if len(segments) > MAX_PATH_SEGMENTS:
        raise InvalidRequest(
            f"{what} {text[:60]!r} has {len(segments)} segments, over {MAX_PATH_SEGMENTS}"
        )
    for segment in segments:
        if segment in ("", ".", ".."):  # one test on the way through: every path comes here
            if not segment:
                raise InvalidRequest(f"{what} {text!r} has an empty segment ('//')")
            raise InvalidRequest(f"{what} {text!r} has {segment!r} as a segment")
        if not segment.isascii():
            for ch in segment:
                kind = _REFUSED.get(unicodedata.category(ch))
                if kind == "surrogate":
                    raise InvalidRequest(f"{what} {text!r} is not valid Unicode")
                if kind:
                    raise InvalidRequest(
                        f"{what} {text!r} contains the {kind} character U+{ord(ch):04X}"
                    )
            if not unicodedata.is_normalized("NFC", segment):
                raise InvalidRequest(
                    f"{what} {text!r} is not in Unicode Normalization Form C (NFC would spell "
                    f"it {unicodedata.normalize('NFC', text)!r})"
                )
        elif not segment.isprintable():
            ch = next(c for c in segment if not c.isprintable())
            raise InvalidRequest(f"{what} {text!r} contains the control character U+{ord(ch):04X}")
        if len(segment.encode()) > MAX_SEGMENT_BYTES:
            raise NameTooLong(
                f"{what} {text!r}: segment {segment[:40]!r}... is over {MAX_SEGMENT_BYTES} bytes"
            )
    if len(text.encode()) > MAX_PATH_BYTES:
        raise NameTooLong(f"{what} {text[:60]!r}... is over {MAX_PATH_BYTES} bytes")


def decode_name(raw: bytes) -> str:
    """One file name as a filesystem gives it: UTF-8 in NFC, at most ``MAX_SEGMENT_BYTES``.
    (A longer name is ``NameTooLong``, also for a lookup; another spelling is ``InvalidName``:
    two names that look the same must not become two memories.)"""
    if len(raw) > MAX_SEGMENT_BYTES:
        raise NameTooLong(f"file name of {len(raw)} bytes is over {MAX_SEGMENT_BYTES}")
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidName(f"file name {raw!r} is not UTF-8") from None
    if not name.isascii() and not unicodedata.is_normalized("NFC", name):
        raise InvalidName(
            f"file name {name!r} is not in Unicode NFC (NFC spells it "
            f"{unicodedata.normalize('NFC', name)!r})"
        )
    return name


def validate_path(path: object) -> str:
    """Return ``path`` if it is a valid memory path, else raise ``InvalidRequest``."""
    if not isinstance(path, str) or not path:
        raise InvalidRequest(f"path must be a non-empty string, got {path!r}")
    if not path.startswith("/"):
        raise InvalidRequest(f"path {path!r} must be absolute (start with '/')")
    if path.endswith("/"):
        raise InvalidRequest(f"path {path!r} must not end with '/': that names a directory")
    _check_segments(path, "path", path[1:].split("/"))
    return path


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a valid directory prefix (``/`` or ``/a/b/``)."""
    if not isinstance(prefix, str) or not prefix.startswith("/") or not prefix.endswith("/"):
        raise InvalidRequest(f"path_prefix {prefix!r} must start and end with '/'")
    if prefix != ROOT:
        _check_segments(prefix, "path_prefix", prefix[1:-1].split("/"))
    return prefix


def as_prefix(path: str) -> str:
    """The directory prefix named by ``path``: ``/a/b`` → ``/a/b/``."""
    return path if path.endswith("/") else path + "/"


def parent_prefix(path: str) -> str:
    """The prefix of the directory holding ``path``: ``/a/b.md`` → ``/a/``, ``/a/`` → ``/``."""
    return path.rstrip("/").rsplit("/", 1)[0] + "/"


def ancestor_prefixes(path: str) -> list[str]:
    """Every directory above ``path`` except the root: ``/a/b/c.md`` → ``['/a/', '/a/b/']``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) + "/" for i in range(len(parts))]


def prefix_upper_bound(prefix: str) -> str:
    """Smallest string above every path under ``prefix``: everything under ``/a/`` sorts before
    ``/a0`` because ``0`` follows ``/`` in ASCII. Used for index range scans."""
    return prefix[:-1] + "0"


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def slug_for(name: str) -> str:
    """A store's directory name: lowercased, every run of non-alphanumerics one hyphen."""
    from slugify import slugify  # here: ~9 ms of every start otherwise

    slug = slugify(name, max_length=MAX_SEGMENT_BYTES, word_boundary=False) or "store"
    return slug


def unique_slugs(names: Iterable[str]) -> list[str]:
    """Slugs for stores attached in this order; a repeat gets ``-2``, ``-3``... stably."""
    taken: set[str] = set()
    result: list[str] = []
    for name in names:
        base = slug_for(name)
        slug, n = base, 1
        while slug in taken:
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug)
        result.append(slug)
    return result


# Names that editors and tools give their temporary files (sed -i, tempfile, rsync, vim...):
# the mount keeps them in memory and sync mode leaves them alone.
TEMP_NAME = re.compile(
    r"""^(?:
        sed[A-Za-z0-9]{6}            # GNU sed -i
      | tmp[a-z0-9_]{8}.*            # Python tempfile
      | \.\#.*                       # Emacs lock / temp
      | \..+\.[A-Za-z0-9]{6}         # rsync, many atomic writers: .name.XXXXXX
      | 4913                         # vim's "can I write here" probe
      | .*\.sw[a-px]                 # vim swap, and its .swx probe of short names
      | .*~                          # backups
      | .*\.(?:tmp|temp|new|part)    # explicit temporary suffixes
    )$""",
    re.VERBOSE,
)
