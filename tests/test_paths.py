"""Path and slug rules: pure functions, no database."""

from __future__ import annotations

import re
import time

import pytest

from mnemofs.errors import InvalidRequest, NameTooLong
from mnemofs.paths import (
    ancestor_prefixes,
    parent_prefix,
    prefix_upper_bound,
    slug_for,
    unique_slugs,
    validate_path,
    validate_prefix,
)


@pytest.mark.parametrize(
    "path", ["/a", "/notes/todo.md", "/ünï/cödé.md", "/a b/c-d_e.txt", "/.hidden"]
)
def test_valid_paths(path: str) -> None:
    assert validate_path(path) == path


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("", "non-empty"),
        ("a/b", "absolute"),
        ("/a/", "must not end"),
        ("/", "must not end"),
        ("//a", "has an empty segment ('//')"),
        ("/a//b", "has an empty segment ('//')"),
        ("/./a", "'.'"),
        ("/a/../b", "'..'"),
        ("/a\x00b", "U+0000"),
        ("/a\nb", "U+000A"),
        ("/a\x7fb", "U+007F"),
        ("/a\ud800", "not valid Unicode"),
    ],
)
def test_invalid_paths_name_the_problem(path: str, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_path(path)
    assert fragment in info.value.message


def test_segment_and_path_byte_limits() -> None:
    assert validate_path("/" + "a" * 255)
    assert validate_path("/" + "é" * 127)  # 254 bytes
    with pytest.raises(NameTooLong):
        validate_path("/" + "é" * 128)  # 256 bytes
    long_ok = "/" + "/".join(["a" * 100] * 10)  # 1,010 bytes
    assert validate_path(long_ok)
    with pytest.raises(NameTooLong):
        validate_path(long_ok + "/" + "b" * 14)  # 1,025 bytes


def test_prefixes() -> None:
    assert validate_prefix("/") == "/"
    assert validate_prefix("/notes/") == "/notes/"
    for bad in ["", "/notes", "notes/", "//", "/a//"]:
        with pytest.raises(InvalidRequest):
            validate_prefix(bad)


def test_tree_helpers() -> None:
    assert ancestor_prefixes("/a/b/c.md") == ["/a/", "/a/b/"]
    assert ancestor_prefixes("/c.md") == []
    assert parent_prefix("/a/b.md") == "/a/"
    assert parent_prefix("/a/") == "/"
    upper = prefix_upper_bound("/notes/")
    assert upper == "/notes0"
    assert "/notes/" < "/notes/zzz" < "/notes/\U0010ffff" < upper
    assert not ("/notes/" <= "/notes-archive/x" < upper)


def test_slugs() -> None:
    assert slug_for("Demo Memory") == "demo-memory"
    assert slug_for("  User -- Preferences!! ") == "user-preferences"
    assert slug_for("!!!") == "store"
    assert unique_slugs(["Demo", "demo", "DEMO", "demo-2"]) == [
        "demo",
        "demo-2",
        "demo-3",
        "demo-2-2",
    ]


def test_ids_are_ulids_that_sort_by_time() -> None:
    from mnemofs.models import MEMORY_PREFIX, new_id

    first = new_id(MEMORY_PREFIX)
    time.sleep(0.002)
    later = [new_id(MEMORY_PREFIX) for _ in range(100)]
    pattern = re.compile(r"mem_[0-7][0-9A-HJKMNP-TV-Z]{25}")
    assert all(pattern.fullmatch(i) for i in [first, *later])
    assert all(first[:14] < i[:14] for i in later)  # the first 10 characters are the time
    assert len(set(later)) == 100


def test_ids_made_in_one_millisecond_keep_their_order() -> None:
    from mnemofs.models import new_ulid

    made = [new_ulid() for _ in range(2000)]  # many share a millisecond
    assert made == sorted(made)
    assert len(set(made)) == len(made)
