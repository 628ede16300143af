"""POSIX fidelity through a real mount (issue 16): each test failed before its fix."""

from __future__ import annotations

import errno
import grp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .mounted import errno_of, versions, wait_for
from .test_mount import Env, env

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


def test_bytes_that_are_never_text_fail_the_write_a_shell_reports(env: Env) -> None:
    """A shell ignores a failed close, so bytes no memory can hold (a NUL, or one that UTF-8
    never has) are refused at the write, which it reports; the close refuses too, and the
    store keeps what it had. A temporary file (vim's swap) holds anything: it is never saved."""
    todo = env.rw / "notes" / "todo.md"
    before = versions(env.service, env.rw_id)
    for command in (r"printf 'x\000y' >> notes/todo.md", r"printf '\377' > notes/new.md"):
        ran = subprocess.run(["sh", "-c", command], cwd=env.rw, capture_output=True, text=True)
        assert ran.returncode != 0, command
        assert "printf" in ran.stderr, ran.stderr  # dash: "printf: I/O error"
    assert todo.read_text() == "- buy milk\n"
    assert wait_for(lambda: not (env.rw / "notes" / "new.md").exists(), timeout=1.0)
    with pytest.raises(OSError) as info, open(env.rw / "notes" / "py.md", "w") as f:
        f.write("nul \0 in text")
    assert info.value.errno == errno.EILSEQ
    assert versions(env.service, env.rw_id) == before
    assert env.paths() == ["/notes/todo.md"]
    swap = env.rw / "notes" / ".todo.md.swp"
    swap.write_bytes(b"b0VIM\0\xff\xfe\0")  # the swap file's own bytes, untouched
    assert swap.read_bytes() == b"b0VIM\0\xff\xfe\0"
    swap.unlink()
    assert versions(env.service, env.rw_id) == before


def test_a_temporary_file_a_real_name_refuses_stays_as_it_was(env: Env) -> None:
    """A temporary file renamed to a real name is saved then; when that save is refused (here
    a NUL), the rename fails and the temporary file is still there, every byte of it."""
    notes = env.rw / "notes"
    before = versions(env.service, env.rw_id)
    (notes / "page.md.tmp").write_bytes(b"downloaded\0page")
    assert errno_of(os.rename, notes / "page.md.tmp", notes / "page.md") == errno.EILSEQ
    assert (notes / "page.md.tmp").read_bytes() == b"downloaded\0page"
    assert not (notes / "page.md").exists()
    assert sorted(os.listdir(notes)) == ["page.md.tmp", "todo.md"]
    (notes / "page.md.tmp").write_bytes(b"downloaded page\n")  # mended: now it can be saved
    os.rename(notes / "page.md.tmp", notes / "page.md")
    assert env.memory("/notes/page.md").content == "downloaded page\n"
    assert len(versions(env.service, env.rw_id)) == len(before) + 1


def test_a_temporary_file_the_store_refuses_outlives_its_grace(env: Env) -> None:
    """A temporary file left alone past its grace is saved as a memory. One the store refuses
    (here the NUL of a swap file a crashed vim left) stays what it was, every byte of it, told
    once in ``.mnemofs/refusals``; an unlink ends it as before. It vanished, unsaid."""
    notes = env.rw / "notes"
    before = versions(env.service, env.rw_id)
    swap = notes / ".todo.md.swp"
    swap.write_bytes(b"b0VIM 9.0\0\xff\xfe")
    (notes / "draft.md.tmp").write_bytes(b"fine text\n")  # made after: promoted after it
    assert wait_for(lambda: "/notes/draft.md.tmp" in env.paths(), timeout=10.0)
    time.sleep(1.5)  # a later pass of the promotion, which must not say it again
    assert sorted(os.listdir(notes)) == [".todo.md.swp", "draft.md.tmp", "todo.md"]
    assert swap.read_bytes() == b"b0VIM 9.0\0\xff\xfe"
    refusals = (env.root / ".mnemofs" / "refusals").read_text().splitlines()
    assert len(refusals) == 1, refusals
    assert "agent-notes/notes/.todo.md.swp  save as a memory: EILSEQ: " in refusals[0]
    assert "kept in memory" in refusals[0]
    swap.unlink()
    assert sorted(os.listdir(notes)) == ["draft.md.tmp", "todo.md"]
    assert versions(env.service, env.rw_id) == [("created", "/notes/draft.md.tmp"), *before]


def test_a_refused_rename_over_a_file_not_yet_saved_keeps_both(env: Env) -> None:
    """The same refused rename over a file still open and never saved: both names stay as they
    were, and the target is saved when it is closed, as if nothing had happened."""
    notes = env.rw / "notes"
    (notes / "page.md.tmp").write_bytes(b"downloaded\0page")
    fd = os.open(notes / "page.md", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        assert errno_of(os.rename, notes / "page.md.tmp", notes / "page.md") == errno.EILSEQ
        assert sorted(os.listdir(notes)) == ["page.md", "page.md.tmp", "todo.md"]
        os.write(fd, b"written after\n")
    finally:
        os.close(fd)
    assert (notes / "page.md.tmp").read_bytes() == b"downloaded\0page"
    assert env.memory("/notes/page.md").content == "written after\n"


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


def test_a_directory_s_times_move_with_its_entries(env: Env) -> None:
    d = env.rw / "notes"
    other = env.rw / "other"
    other.mkdir()

    def times(p: os.PathLike[str]) -> tuple[int, int]:
        st = os.stat(p)
        return st.st_mtime_ns, st.st_ctime_ns

    def moves(action: object, *dirs: os.PathLike[str]) -> None:
        before = [times(x) for x in dirs]
        time.sleep(0.01)
        action()  # type: ignore[operator]
        for x, (mtime, ctime) in zip(dirs, before, strict=True):
            assert os.stat(x).st_mtime_ns > mtime, (action, x)
            assert os.stat(x).st_ctime_ns > ctime, (action, x)

    moves(lambda: os.close(os.open(d / "new.md", os.O_CREAT | os.O_WRONLY, 0o600)), d)
    moves(lambda: os.mkdir(d / "sub"), d)
    moves(lambda: os.rmdir(d / "sub"), d)
    moves(lambda: os.rename(d / "new.md", other / "moved.md"), d, other)
    moves(lambda: os.unlink(other / "moved.md"), other)


def test_atime_is_kept_as_set(env: Env) -> None:
    f = env.rw / "notes" / "todo.md"
    os.utime(f, ns=(1_000_000_000_000_000_000, 1_500_000_000_000_000_000))
    st = os.stat(f)
    assert (st.st_atime_ns, st.st_mtime_ns) == (
        1_000_000_000_000_000_000,
        1_500_000_000_000_000_000,
    )


def test_times_set_before_the_close_are_kept(env: Env, tmp_path: Path) -> None:
    """``cp -a`` and ``cp -p`` write a file, set the source's times on the descriptor and
    only then close it: those times stand, though that is when the content is saved."""
    source = tmp_path / "old.md"
    source.write_text("written long ago\n")
    os.utime(source, ns=(1_100_000_000_000_000_000, 1_200_000_000_000_000_000))
    for flag in ("-a", "-p"):
        target = env.rw / f"copied{flag}.md"
        subprocess.run(["cp", flag, str(source), str(target)], check=True)
        st = os.stat(target)
        assert st.st_mtime_ns == 1_200_000_000_000_000_000, flag
        assert target.read_text() == "written long ago\n"
        memory = env.memory(f"/copied{flag}.md")
        history = env.service.list_versions(env.rw_id, memory_id=memory.id)
        assert len(list(history)) == 1  # one save, as the times were set
    fd = os.open(env.rw / "python.md", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"saved as its times were set\n")
        os.utime(fd, ns=(1_300_000_000_000_000_000, 1_400_000_000_000_000_000))
        assert os.fstat(fd).st_mtime_ns == 1_400_000_000_000_000_000
    finally:
        os.close(fd)
    assert os.stat(env.rw / "python.md").st_mtime_ns == 1_400_000_000_000_000_000


def test_nlink_counts_subdirectories_and_unlinked_files(env: Env) -> None:
    assert os.stat(env.rw).st_nlink == 3  # ., .. and notes/
    (env.rw / "a").mkdir()
    (env.rw / "a" / "b").mkdir()
    assert os.stat(env.rw).st_nlink == 4
    assert os.stat(env.rw / "a").st_nlink == 3
    assert os.stat(env.rw / "a" / "b").st_nlink == 2
    f = env.rw / "gone.md"
    f.write_text("soon gone\n")
    fd = os.open(f, os.O_RDONLY)
    try:
        assert os.fstat(fd).st_nlink == 1
        os.unlink(f)
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)


def test_growing_a_file_is_refused_at_the_call_either_way(env: Env) -> None:
    """Growing would pad with NUL bytes, which content cannot hold: truncate and ftruncate both
    fail at the call with EILSEQ, and the file is as it was; shrinking works for both."""
    f = env.rw / "notes" / "todo.md"
    assert errno_of(os.truncate, f, 100) == errno.EILSEQ
    fd = os.open(f, os.O_RDWR)
    try:
        assert errno_of(os.ftruncate, fd, 100) == errno.EILSEQ
        os.ftruncate(fd, 6)
    finally:
        os.close(fd)
    assert f.read_text() == "- buy "
    os.truncate(f, 2)
    assert f.read_text() == "- "
    assert env.memory("/notes/todo.md").content == "- "


def test_only_the_owner_changes_modes_and_times(env: Env) -> None:
    """A group member let in by --group-access may write, but chmod and explicit times are the
    owner's (POSIX: EPERM), and it sees the times and sizes the owner sees."""
    from .mounted import mounted

    base = Path(tempfile.mkdtemp(prefix="mnemofs-posix-"))  # a path 'nobody' can walk
    base.chmod(0o755)
    root = base / "shared"
    group = grp.getgrnam("nogroup").gr_gid
    with mounted(
        env.db_url, env.session_id, root, "--allow-other", "--gid", str(group), "--group-access"
    ):
        f = root / "agent-notes" / "notes" / "todo.md"
        st = os.stat(env.rw / "notes" / "todo.md")  # what the owner sees, through its mount
        script = (
            f"chmod 600 {f} 2>&1; touch -d @1000000 {f} 2>&1; "
            f"stat -c '%s %Y' {f}; echo more >> {f} && echo appended"
        )
        done = subprocess.run(
            ["runuser", "-u", "nobody", "-g", "nogroup", "--", "sh", "-c", script],
            capture_output=True,
            text=True,
        )
        lines = done.stdout.splitlines()
        assert "Operation not permitted" in lines[0]
        assert "Operation not permitted" in lines[1]
        assert lines[2] == f"{st.st_size} {int(st.st_mtime)}"
        assert lines[3] == "appended"
    shutil.rmtree(base, ignore_errors=True)


def test_nfd_names_are_refused_by_the_cli_and_sync_too(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'n.db'}"
    cli = [sys.executable, "-m", "mnemofs", "--db", db]
    subprocess.run([*cli, "stores", "create", "Notes"], check=True, capture_output=True)
    nfd = "/cafe\u0301.md"
    done = subprocess.run(
        [*cli, "memories", "create", "Notes", nfd, "--content", "x"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "Normalization Form C" in done.stderr
    root = tmp_path / "synced"
    sync = [*cli, "sync", "--attach", "Notes", "--root", str(root), "--once"]
    subprocess.run(sync, check=True, capture_output=True)
    (root / "notes" / "cafe\u0301.md").write_text("spelled in NFD\n")
    (root / "notes" / "caf\u00e9.md").write_text("spelled in NFC\n")
    out = subprocess.run(sync, capture_output=True, text=True)
    assert out.returncode == 1, out.stderr  # the NFD name is left out of step
    listed = subprocess.run(
        [*cli, "--json", "memories", "list", "Notes"], capture_output=True, text=True, check=True
    )
    assert [m["path"] for m in json.loads(listed.stdout)["data"]] == ["/caf\u00e9.md"]
    assert "Normalization Form C" in (root / ".mnemofs-sync-errors").read_text(), out


def test_a_directory_changed_elsewhere_shows_it_at_once(env: Env) -> None:
    """The kernel keeps names and attributes for a minute (adapter.TIMEOUT_S): a change made
    elsewhere must drop the directory's cached times and link count, not wait that out."""
    notes = env.rw / "notes"
    before = os.stat(notes)
    time.sleep(0.02)
    env.service.create_memory(env.rw_id, "/notes/sub/elsewhere.md", "from the API\n")
    assert wait_for(lambda: os.stat(notes).st_nlink == before.st_nlink + 1, timeout=5)
    assert os.stat(notes).st_mtime_ns > before.st_mtime_ns
    assert (notes / "sub" / "elsewhere.md").read_text() == "from the API\n"
    env.service.delete_memory(env.rw_id, env.memory("/notes/todo.md").id)
    assert wait_for(lambda: not (notes / "todo.md").exists(), timeout=5)
