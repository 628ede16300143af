"""POSIX fidelity through a real mount (issue 16): each test failed before its fix."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from .test_mount import Env, env, errno_of

__all__ = ["env"]  # the fixture, used by name

pytestmark = pytest.mark.mounted


def test_readdir_has_dot_entries(env: Env) -> None:
    listed = subprocess.run(["ls", "-a", str(env.rw / "notes")], capture_output=True, text=True)
    assert listed.stdout.split() == [".", "..", "todo.md"]
    with os.scandir(env.rw) as entries:  # scandir leaves the dots out, as everywhere
        assert [e.name for e in entries] == ["notes"]
    top = subprocess.run(["ls", "-a", str(env.root)], capture_output=True, text=True).stdout
    assert top.split() == [".", "..", "agent-notes", "reference"]
    # Paging through a big directory still gives every entry once, dots first.
    for i in range(300):
        (env.rw / "big").mkdir(exist_ok=True)
        (env.rw / "big" / f"f{i:03d}.md").write_text("x")
    fd = os.open(env.rw / "big", os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = [n for n in _getdents(fd)]
    finally:
        os.close(fd)
    assert names[:2] == [".", ".."]
    assert sorted(names[2:]) == [f"f{i:03d}.md" for i in range(300)]


def _getdents(fd: int) -> list[str]:
    listed = subprocess.run(
        ["ls", "-a", "-f", f"/proc/self/fd/{fd}"], capture_output=True, text=True, pass_fds=(fd,)
    )
    return listed.stdout.split()


def test_a_name_that_is_not_utf8_is_eilseq(env: Env) -> None:
    bad = os.fsencode(str(env.rw)) + b"/\xff\xfe.md"
    assert errno_of(os.open, bad, os.O_CREAT | os.O_WRONLY, 0o600) == errno.EILSEQ
    assert errno_of(os.mkdir, bad) == errno.EILSEQ
    assert "Traceback" not in env.daemon.log.read_text()
    assert env.paths() == ["/notes/todo.md"]


def test_names_are_nfc_on_every_face(env: Env) -> None:
    """A name spelled in NFD is refused (EILSEQ) rather than stored as a second memory that
    looks the same; the NFC spelling works, and is what the CLI and the API find."""
    nfc, nfd = "caf\u00e9.md", "cafe\u0301.md"
    assert errno_of(os.open, env.rw / nfd, os.O_CREAT | os.O_WRONLY, 0o600) == errno.EILSEQ
    (env.rw / nfc).write_text("coffee\n")
    assert errno_of(os.stat, env.rw / nfd) == errno.EILSEQ
    assert env.memory(f"/{nfc}").content == "coffee\n"
    assert env.paths() == [f"/{nfc}", "/notes/todo.md"]


def test_long_names_are_enametoolong_for_every_call(env: Env) -> None:
    long = env.rw / ("x" * 256)
    for call in (os.stat, os.unlink, os.rmdir, lambda p: os.truncate(p, 0)):
        assert errno_of(call, long) == errno.ENAMETOOLONG, call
    assert errno_of(os.rename, long, env.rw / "short.md") == errno.ENAMETOOLONG
    assert errno_of(os.open, long, os.O_CREAT | os.O_WRONLY, 0o600) == errno.ENAMETOOLONG
