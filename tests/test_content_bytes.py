"""Which bytes of a write can be refused before the file is whole (``content.never_text``):
no database, no mount."""

from __future__ import annotations

from mnemofs.content import never_text


def test_a_write_is_refused_for_exactly_the_bytes_no_text_holds() -> None:
    """``never_text`` flags a byte iff no memory's UTF-8 can hold it: derived from UTF-8
    itself (every scalar value but NUL, encoded), so a write is never refused for a byte that
    a valid file could have, split as the writes may be."""
    held = set()
    for cp in range(1, 0x110000):
        if not 0xD800 <= cp <= 0xDFFF:
            held.update(chr(cp).encode())
    assert {b for b in range(256) if never_text(bytes([b])) is not None} == set(range(256)) - held
    assert never_text("plain, é, €, 😀\n".encode()) is None
    assert never_text(b"abc\0") == 3  # an ASCII write looks for NUL alone
    assert never_text("é".encode() + b"\xff") == 2
    assert never_text("é".encode()[:1]) is None  # a character cut between two writes
