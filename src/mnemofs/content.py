"""One memory content, validated and hashed once: its text, the SHA-256 of its UTF-8 bytes and
their size. Made where a save enters (a mount's buffer, the CLI, a sync upload, the API) and
carried down to the SQL, so no layer decodes, checks or hashes it again.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from mnemofs import limits
from mnemofs.errors import ContentTooLarge, InvalidContent, InvalidRequest


@dataclass(frozen=True, slots=True)
class Content:
    text: str
    sha256: str  # hex SHA-256 of the UTF-8 bytes, no normalisation
    size: int  # bytes

    @classmethod
    def from_bytes(cls, data: bytes) -> Content:
        """Bytes saved through a file; ``InvalidContent`` unless valid UTF-8 without NUL."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidContent(
                f"content is not valid UTF-8 (byte {exc.start}: "
                f"{data[exc.start : exc.start + 1]!r})"
            ) from None
        return cls._checked(text, data)

    @classmethod
    def from_text(cls, text: object) -> Content:
        """Text given as such (CLI, API); ``InvalidRequest`` for anything but a string."""
        if isinstance(text, Content):
            return text
        if not isinstance(text, str):
            raise InvalidRequest(f"content must be a string, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidContent(
                f"content is not valid Unicode text (U+{ord(text[exc.start]):04X} "
                f"at character {exc.start})"
            ) from None
        return cls._checked(text, data)

    @classmethod
    def stored(cls, text: str, sha256: str, size: int) -> Content:
        """Content read back from the database: checked when it was saved."""
        return cls(text, sha256, size)

    @classmethod
    def _checked(cls, text: str, data: bytes) -> Content:
        if len(data) > limits.MAX_CONTENT_BYTES:
            raise ContentTooLarge(
                f"content is {len(data)} bytes, over the limit of {limits.MAX_CONTENT_BYTES} bytes"
            )
        if "\x00" in text:
            raise InvalidContent(f"content contains a NUL character at {text.index(chr(0))}")
        return cls(text, hashlib.sha256(data).hexdigest(), len(data))


# A NUL (content is text without one) and the bytes UTF-8 never uses: 0xC0 and 0xC1 (they
# could only begin an overlong form) and 0xF5-0xFF (beyond U+10FFFF, or no lead byte at all).
_NEVER_IN_TEXT = re.compile(rb"[\x00\xc0\xc1\xf5-\xff]")
_TEXT_BYTES = bytes(b for b in range(256) if not _NEVER_IN_TEXT.match(bytes([b])))


def never_text(data: bytes) -> int | None:
    """Where ``data`` holds a byte no memory content can hold, wherever it ends up in the
    file (a NUL, or one that valid UTF-8 never has); None if it has none. Part of a file's
    bytes can be decided this far; whether they are valid UTF-8 waits for the whole file."""
    if data.isascii():
        found = data.find(0)
        return None if found < 0 else found
    if not data.translate(None, _TEXT_BYTES):  # ~3 µs for 4 KiB; the search takes ~14
        return None
    match = _NEVER_IN_TEXT.search(data)
    return None if match is None else match.start()
