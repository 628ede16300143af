"""The live mount, for real: a daemon process, the kernel, and ordinary programs and syscalls."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mnemofs import limits
from mnemofs.fs.mount import TRIM_INTERVAL_S
from mnemofs.models import Memory
from mnemofs.store import Engine, MemoryService, make_engine
from mnemofs.store.folders import FileIn

from .mounted import Daemon, errno_of, mounted, run, versions, wait_for

pytestmark = pytest.mark.mounted


@dataclass
class Env:
    service: MemoryService
    db_url: str
    root: Path
    rw: Path
    ro: Path
    rw_id: str
    ro_id: str
    session_id: str
    daemon: Daemon

    def memory(self, path: str) -> Memory:
        return self.service.find_memory(self.rw_id, path)

    def paths(self, store_id: str | None = None) -> list[str]:
        return [
            m.path
            for m in self.service.list_memories(store_id or self.rw_id)
            if isinstance(m, Memory)
        ]


@pytest.fixture
def env(db_url: str, engine: Engine, tmp_path: Path) -> Iterator[Env]:
    """A daemon serving a read_write and a read_only store, on each backend."""
    service = MemoryService(engine, actor="api")
    rw = service.create_store("Agent Notes", "what the agent learns").id
    ro = service.create_store("Reference", "read-only material").id
    service.create_memory(rw, "/notes/todo.md", "- buy milk\n")
    service.create_memory(ro, "/standards.md", "Use ISO dates.\n")
    root = tmp_path / "mnt"
    session = service.create_session(
        [{"memory_store_id": rw}, {"memory_store_id": ro, "access": "read_only"}],
        mount_root=str(root),
    )
    with mounted(db_url, session.id, root) as daemon:
        yield Env(
            service,
            db_url,
            root,
            root / "agent-notes",
            root / "reference",
            rw,
            ro,
            session.id,
            daemon,
        )
    service.close()


# -- layout and reading -----------------------------------------------------------------------


def test_layout_and_modes(env: Env) -> None:
    assert sorted(os.listdir(env.root)) == ["agent-notes", "reference"]
    assert (env.rw / "notes" / "todo.md").read_text() == "- buy milk\n"
    assert (env.ro / "standards.md").read_text() == "Use ISO dates.\n"
    assert oct(env.root.stat().st_mode & 0o777) == "0o500"  # owner-only: memory is private
    assert oct(env.rw.stat().st_mode & 0o777) == "0o700"
    assert oct((env.rw / "notes" / "todo.md").stat().st_mode & 0o777) == "0o600"
    assert oct(env.ro.stat().st_mode & 0o777) == "0o500"
    assert oct((env.ro / "standards.md").stat().st_mode & 0o777) == "0o400"
    out = run("ls", "-la", str(env.rw / "notes")).stdout
    assert "todo.md" in out
    assert run("stat", "-c", "%s", str(env.rw / "notes" / "todo.md")).stdout.strip() == "11"
    found = run("find", str(env.root), "-type", "f").stdout.split()
    assert sorted(found) == sorted(
        [str(env.rw / "notes" / "todo.md"), str(env.ro / "standards.md")]
    )
    assert "ISO" in run("grep", "-r", "ISO", str(env.root)).stdout
    memory = env.memory("/notes/todo.md")
    xattr = os.getxattr(env.rw / "notes" / "todo.md", "user.mnemofs.memory_id")
    assert xattr.decode() == memory.id
    assert os.getxattr(env.rw / "notes" / "todo.md", "user.mnemofs.sha256").decode() == (
        memory.content_sha256
    )
    assert os.getxattr(env.rw / "notes" / "todo.md", "user.mnemofs.version_id").decode() == (
        memory.memory_version_id
    )
    assert errno_of(os.getxattr, env.rw / "notes" / "todo.md", "user.other") == errno.ENODATA
    for _ in range(2):  # the first asks the mount (ENOSYS), the next only the kernel
        assert errno_of(os.setxattr, env.rw / "notes" / "todo.md", "user.x", b"1") == errno.ENOTSUP
        assert errno_of(os.removexattr, env.rw / "notes" / "todo.md", "user.x") == errno.ENOTSUP
    st = os.statvfs(env.root)
    assert st.f_files == 20_000
    assert st.f_ffree == 20_000 - 2
    assert st.f_namemax == 255


# -- writing: one version per save ------------------------------------------------------------


def test_shell_writes(env: Env) -> None:
    d = env.rw
    run("sh", "-c", f"echo hello > {d}/a.md")
    assert (d / "a.md").read_text() == "hello\n"
    run("sh", "-c", f"echo world >> {d}/a.md")
    run("sh", "-c", f"printf 'x%sy' 1 > {d}/p.md")
    assert (d / "a.md").read_text() == "hello\nworld\n"
    assert (d / "p.md").read_text() == "x1y"
    run("touch", str(d / "empty.md"))
    assert env.memory("/empty.md").content == ""
    run("truncate", "-s", "3", str(d / "a.md"))
    assert env.memory("/a.md").content == "hel"
    assert versions(env.service, env.rw_id)[:6] == [
        ("modified", "/a.md"),
        ("created", "/empty.md"),
        ("created", "/p.md"),
        ("modified", "/a.md"),
        ("created", "/a.md"),
        ("created", "/notes/todo.md"),
    ]


@pytest.mark.parametrize("how", ["sed", "python-replace", "echo", "cp"])
def test_one_version_per_logical_save(env: Env, how: str, tmp_path: Path) -> None:
    target = env.rw / "notes" / "todo.md"
    memory = env.memory("/notes/todo.md")
    before = versions(env.service, env.rw_id)
    if how == "sed":
        run("sed", "-i", "s/milk/bread/", str(target))
        expected = "- buy bread\n"
    elif how == "python-replace":
        with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False) as tmp:
            tmp.write("- buy eggs\n")
        inode = os.stat(tmp.name).st_ino
        os.replace(tmp.name, target)
        assert os.stat(target).st_ino == inode  # as POSIX says: the source's inode moved
        expected = "- buy eggs\n"
    elif how == "echo":
        run("sh", "-c", f"echo '- buy tea' > {target}")
        expected = "- buy tea\n"
    else:
        source = tmp_path / "src.md"
        source.write_text("- buy rice\n")
        run("cp", str(source), str(target))
        expected = "- buy rice\n"
    assert target.read_text() == expected
    after = versions(env.service, env.rw_id)
    assert after[1:] == before  # the whole list has exactly one new version...
    assert after[0] == ("modified", "/notes/todo.md")  # ...for the target
    assert env.memory("/notes/todo.md").id == memory.id  # which keeps its id
    assert env.paths() == ["/notes/todo.md"]  # and no temporary file was left behind
    assert sorted(os.listdir(target.parent)) == ["todo.md"]


def test_saving_identical_content_makes_no_version(env: Env) -> None:
    before = versions(env.service, env.rw_id)
    run("sh", "-c", f"printf -- '- buy milk\\n' > {env.rw}/notes/todo.md")
    assert versions(env.service, env.rw_id) == before


def test_copy_move_remove_directories(env: Env, tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "a.md").write_text("a")
    (src / "sub" / "b.md").write_text("b")
    run("cp", "-r", str(src), str(env.rw / "tree"))
    assert sorted(env.paths()) == ["/notes/todo.md", "/tree/a.md", "/tree/sub/b.md"]
    run("mkdir", "-p", str(env.rw / "x" / "y" / "z"))
    assert (env.rw / "x" / "y" / "z").is_dir()
    run("mv", str(env.rw / "tree"), str(env.rw / "x" / "moved"))
    assert sorted(env.paths()) == ["/notes/todo.md", "/x/moved/a.md", "/x/moved/sub/b.md"]
    run("mv", str(env.rw / "x" / "moved" / "a.md"), str(env.rw / "a2.md"))
    assert env.memory("/a2.md").content == "a"
    assert errno_of(os.rmdir, env.rw / "x" / "moved") == errno.ENOTEMPTY
    run("rmdir", str(env.rw / "x" / "y" / "z"))
    assert not (env.rw / "x" / "y" / "z").exists()
    run("rm", str(env.rw / "a2.md"))
    run("rm", "-r", str(env.rw / "x"))
    assert env.paths() == ["/notes/todo.md"]
    assert sorted(os.listdir(env.rw)) == ["notes"]
    ops = [op for op, _ in versions(env.service, env.rw_id)]
    assert ops.count("deleted") == 2


def test_descriptors_share_writes(env: Env) -> None:
    path = env.rw / "shared.md"
    with open(path, "w") as one, open(path) as two:
        one.write("first")
        one.flush()
        assert two.read() == "first"  # before any save: the buffer is shared
    a = os.open(path, os.O_RDWR)
    b = os.open(path, os.O_RDWR)
    try:
        os.pwrite(a, b"FI", 0)
        assert os.pread(b, 10, 0) == b"FIrst"
        os.pwrite(b, b"!", 5)
        assert os.pread(a, 10, 0) == b"FIrst!"
    finally:
        os.close(a)
        os.close(b)
    assert env.memory("/shared.md").content == "FIrst!"
    ops = [op for op, p in versions(env.service, env.rw_id) if p == "/shared.md"]
    assert ops[-1] == "created"
    assert len(ops) <= 3  # one save per close that had something new to save


def test_readers_see_what_write_only_descriptors_wrote(env: Env) -> None:
    """A write-only descriptor bypasses the page cache (fs/adapter.py ``_file_info``): a reader
    holding cached pages, a mapping, and every later open still see its writes."""
    path = env.rw / "cached.md"
    path.write_text("old content\n")
    reader = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(reader, 100, 0) == b"old content\n"  # now in the page cache
        mapped = mmap.mmap(reader, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        assert mapped[:3] == b"old"
        writer = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(writer, b"NEW", 0)
            assert os.pread(reader, 100, 0) == b"NEW content\n"  # before any save
        finally:
            os.close(writer)
        assert mapped[:12] == b"NEW content\n"
        mapped.close()
        appender = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(appender, b"more\n")
        finally:
            os.close(appender)
        assert os.pread(reader, 100, 0) == b"NEW content\nmore\n"
        assert os.fstat(reader).st_size == 17
    finally:
        os.close(reader)
    run("sh", "-c", f"echo last >> {path}")
    assert path.read_bytes() == b"NEW content\nmore\nlast\n"
    with open(path, "w") as f:  # O_WRONLY | O_TRUNC
        f.write("short\n")
    assert path.read_text() == "short\n"
    assert env.memory("/cached.md").content == "short\n"


def test_python_open_modes(env: Env) -> None:
    path = env.rw / "py.md"
    with open(path, "w", encoding="utf-8") as f:
        f.write("héllo\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write("more\n")
    with open(path, "r+", encoding="utf-8") as f:
        f.seek(0)
        f.write("H")
    assert path.read_text(encoding="utf-8") == "Héllo\nmore\n"
    assert env.memory("/py.md").content == "Héllo\nmore\n"


# -- refusals ---------------------------------------------------------------------------------


def test_root_is_read_only(env: Env) -> None:
    before = (env.paths(), env.paths(env.ro_id))
    r = env.root
    assert errno_of(os.mkdir, r / "new") == errno.EROFS
    assert errno_of(os.open, r / "f", os.O_CREAT | os.O_WRONLY) == errno.EROFS
    assert errno_of(os.rename, env.rw, r / "renamed") == errno.EROFS
    assert errno_of(os.rmdir, env.rw) == errno.EROFS
    assert errno_of(os.rename, env.rw / "notes" / "todo.md", r / "todo.md") == errno.EROFS
    assert errno_of(os.chmod, r, 0o777) in (errno.EROFS, errno.EPERM)
    assert (env.paths(), env.paths(env.ro_id)) == before


def test_read_only_store_refuses_every_write(env: Env) -> None:
    f = env.ro / "standards.md"
    before = (versions(env.service, env.ro_id), f.read_bytes())
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_RDONLY | os.O_TRUNC):
        assert errno_of(os.open, f, flags) == errno.EROFS, flags
    assert errno_of(os.open, env.ro / "new.md", os.O_CREAT | os.O_WRONLY) == errno.EROFS
    assert errno_of(os.truncate, f, 0) == errno.EROFS
    assert errno_of(os.unlink, f) == errno.EROFS
    assert errno_of(os.mkdir, env.ro / "d") == errno.EROFS
    assert errno_of(os.rename, f, env.ro / "moved.md") == errno.EROFS
    assert errno_of(os.rename, f, env.rw / "moved.md") in (errno.EROFS, errno.EXDEV)
    assert errno_of(os.rename, env.rw / "notes" / "todo.md", env.ro / "t.md") in (
        errno.EROFS,
        errno.EXDEV,
    )
    assert errno_of(os.utime, f, (1, 1)) == errno.EROFS
    assert errno_of(os.link, f, env.ro / "hard") in (errno.EPERM, errno.EROFS)
    assert errno_of(os.symlink, "standards.md", env.ro / "soft") in (errno.EPERM, errno.EROFS)
    assert errno_of(os.setxattr, f, "user.x", b"1") in (errno.ENOTSUP, errno.EROFS)
    with open(f, "rb") as readable, pytest.raises((OSError, ValueError)):
        mmap.mmap(readable.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE)
    assert (versions(env.service, env.ro_id), f.read_bytes()) == before


def test_refused_operations(env: Env) -> None:
    f = env.rw / "notes" / "todo.md"
    assert errno_of(os.link, f, env.rw / "hard") == errno.EPERM
    assert errno_of(os.symlink, "todo.md", env.rw / "soft") == errno.EPERM
    assert errno_of(os.mknod, env.rw / "fifo", 0o644 | 0o010000) == errno.EPERM
    assert errno_of(os.chown, f, 12345, 12345) == errno.EPERM
    assert errno_of(os.rename, f, env.ro / "x.md") in (errno.EXDEV, errno.EROFS)
    assert env.paths() == ["/notes/todo.md"]


def test_limits_surface_as_errnos(env: Env) -> None:
    before = versions(env.service, env.rw_id)
    big = env.rw / "big.md"
    with pytest.raises(OSError) as info, open(big, "wb") as f:
        f.write(b"x" * 102_401)
    assert info.value.errno == errno.EFBIG
    assert "/big.md" not in env.paths()
    assert wait_for(lambda: not big.exists(), timeout=1.0)  # and the name is gone from the mount
    target = env.rw / "notes" / "todo.md"
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
    assert errno_of(os.write, fd, b"\xff\xfe not utf-8") == errno.EILSEQ  # never in UTF-8
    assert errno_of(os.close, fd) == errno.EILSEQ
    assert env.memory("/notes/todo.md").content == "- buy milk\n"  # the previous head stays
    assert target.read_text() == "- buy milk\n"
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"\x80 cut from a character")  # only the whole file can tell
    assert errno_of(os.close, fd) == errno.EILSEQ
    assert target.read_text() == "- buy milk\n"
    assert errno_of(os.open, env.rw / ("n" * 256), os.O_CREAT | os.O_WRONLY) == errno.ENAMETOOLONG
    assert versions(env.service, env.rw_id) == before


# -- changes made elsewhere, durability, lifecycle --------------------------------------------


def test_api_changes_show_within_a_second(env: Env) -> None:
    target = env.rw / "notes" / "todo.md"
    assert target.read_text() == "- buy milk\n"
    memory = env.memory("/notes/todo.md")
    env.service.update_memory(env.rw_id, memory.id, content="- changed by the API\n", actor="cli")
    assert wait_for(lambda: target.read_text() == "- changed by the API\n", timeout=1.0)
    env.service.create_memory(env.rw_id, "/notes/new.md", "new", actor="cli")
    assert wait_for(lambda: (env.rw / "notes" / "new.md").exists(), timeout=1.0)
    env.service.delete_memory(env.rw_id, memory.id, actor="cli")
    assert wait_for(lambda: not target.exists(), timeout=1.0)


def test_changes_from_elsewhere_show_while_the_mount_writes(env: Env) -> None:
    """A mount busy with its own saves takes them as seen as it goes (fs/refresh.py
    ``adopt_own``), and never one made elsewhere in between: each shows, and every file of
    its own still names its memory's newest version."""
    folder = env.rw / "busy"
    folder.mkdir()
    theirs = []
    for i in range(200):
        (folder / f"f{i}.md").write_text(f"own {i}\n")
        if i % 40 == 20:
            theirs.append(f"t{i}.md")
            env.service.create_memory(env.rw_id, f"/busy/t{i}.md", "theirs\n", actor="cli")
    assert wait_for(lambda: all((folder / name).exists() for name in theirs), timeout=5.0)
    os.rename(folder, env.rw / "moved")  # every memory under it gets a new version
    assert wait_for(lambda: (env.rw / "moved" / "t20.md").exists(), timeout=5.0)
    for i in range(0, 200, 37):
        path = env.rw / "moved" / f"f{i}.md"
        head = env.memory(f"/moved/f{i}.md")
        assert wait_for(
            lambda p=path, h=head: (
                os.getxattr(p, "user.mnemofs.version_id").decode() == h.memory_version_id
            ),
            timeout=5.0,
        )


def test_a_change_made_as_the_mount_starts_shows(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    """A commit between the daemon reading the store and it listening for changes (it has
    said "mounted" by then) still shows, and long before the fallback look a second later
    (which on SQLite would not have seen it either: it compares data_version with what it
    read after the commit)."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Early").id
    session = service.create_session([{"memory_store_id": store}])
    try:
        with mounted(db_url, session.id, tmp_path / "mnt") as daemon:
            service.create_memory(store, "/early.md", "made as the mount started\n", actor="cli")
            target = daemon.root / "early" / "early.md"
            assert wait_for(target.exists, timeout=0.5)
            assert target.read_text() == "made as the mount started\n"
    finally:
        service.close()


def test_close_is_durable_against_kill(env: Env) -> None:
    path = env.rw / "durable.md"
    with open(path, "w") as f:
        f.write("saved before the crash\n")
    env.daemon.stop(signal.SIGKILL)
    assert env.memory("/durable.md").content == "saved before the crash\n"


def test_sigterm_saves_open_files(env: Env) -> None:
    path = env.rw / "open.md"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"written, never closed\n")
    env.daemon.stop(signal.SIGTERM)
    assert env.memory("/open.md").content == "written, never closed\n"
    with pytest.raises(OSError):
        os.close(fd)


def _cpu_seconds(pid: int) -> float:
    """User and system time of a process and all its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_idle_mount_stops_spinning(env: Env) -> None:
    """Within a burst the request loop spins briefly for the next request (fs/loop.py); once
    the requests stop, the daemon sleeps: an idle mount uses no CPU to speak of."""
    pid = env.daemon.process.pid
    for _ in range(300):  # a burst: the loop is spinning between these
        os.stat(env.rw / "notes" / "todo.md")
        (env.rw / "notes" / "todo.md").read_bytes()
    time.sleep(1.0)
    before = _cpu_seconds(pid)
    time.sleep(3.0)
    used = _cpu_seconds(pid) - before
    assert used < 0.15, f"an idle mount used {used:.2f} s of CPU in 3 s"


def test_stale_mount_is_cleaned_up(env: Env) -> None:
    env.daemon.stop(signal.SIGKILL)
    assert errno_of(os.listdir, env.root) == errno.ENOTCONN
    with mounted(env.db_url, env.session_id, env.root):
        assert (env.rw / "notes" / "todo.md").read_text() == "- buy milk\n"


# -- tools ------------------------------------------------------------------------------------


def test_tar_and_rsync(env: Env, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "docs").mkdir(parents=True)
    (src / "docs" / "a.md").write_text("alpha\n")
    (src / "b.md").write_text("beta\n")
    archive = tmp_path / "in.tar"
    run("tar", "-cf", str(archive), "-C", str(src), ".")
    run("mkdir", str(env.rw / "untarred"))
    run("tar", "--no-same-owner", "-xf", str(archive), "-C", str(env.rw / "untarred"))
    assert env.memory("/untarred/docs/a.md").content == "alpha\n"
    out = tmp_path / "out.tar"
    run("tar", "-cf", str(out), "-C", str(env.rw), ".")
    listing = run("tar", "-tf", str(out)).stdout
    assert "./untarred/b.md" in listing
    run("rsync", "-a", f"{src}/", f"{env.rw}/synced/")
    assert env.memory("/synced/docs/a.md").content == "alpha\n"
    assert "/synced/b.md" in env.paths()
    back = tmp_path / "back"
    run("rsync", "-a", f"{env.rw}/", f"{back}/")
    assert (back / "synced" / "docs" / "a.md").read_text() == "alpha\n"
    assert (back / "notes" / "todo.md").read_text() == "- buy milk\n"
    assert not [p for p in env.paths() if "/." in p]  # no rsync temp file was left behind


@pytest.mark.parametrize("swap", [["-n"], []], ids=["no-swap", "swap"])
def test_vim_ex_mode_edit(env: Env, swap: list[str]) -> None:
    """One version, on the file: vim's swap file and its probe of whether names are cut short
    (``.todo.md.swx``, made and removed at once) leave nothing in the store."""
    target = env.rw / "notes" / "todo.md"
    result = subprocess.run(
        ["vim", "-e", "-s", *swap, "-c", "%s/milk/coffee/", "-c", "wq", str(target)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert target.read_text() == "- buy coffee\n"
    assert env.memory("/notes/todo.md").content == "- buy coffee\n"
    assert env.paths() == ["/notes/todo.md"]
    assert versions(env.service, env.rw_id) == [
        ("modified", "/notes/todo.md"),
        ("created", "/notes/todo.md"),
    ]


def test_mkdir_past_the_directory_limit_is_enospc(env: Env) -> None:
    """A store keeps at most MAX_DIRECTORIES_PER_STORE directories: mkdir past it is ENOSPC
    with a refusal line that says what to do, and works again once one is removed."""
    most = limits.MAX_DIRECTORIES_PER_STORE
    room = most - len(env.service.explicit_directories(env.rw_id)) - 1
    env.service.import_files(
        env.rw_id, lambda: [FileIn(f"/dirs/{i:05}", directory=True) for i in range(room)]
    )
    assert wait_for(lambda: (env.rw / "dirs" / f"{room - 1:05}").exists(), timeout=10.0)
    os.mkdir(env.rw / "last")
    assert errno_of(os.mkdir, env.rw / "one-more") == errno.ENOSPC
    assert not (env.rw / "one-more").exists()
    newest = (env.root / ".mnemofs" / "refusals").read_text().splitlines()[0]
    assert "one-more  mkdir: ENOSPC: " in newest, newest
    assert f"keeps {most} directories of its own" in newest, newest
    assert newest.endswith("-> remove empty directories with rmdir"), newest
    os.rmdir(env.rw / "dirs" / "00000")
    os.mkdir(env.rw / "one-more")
    assert len(env.service.explicit_directories(env.rw_id)) == most


def resident_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_files_held_open_are_bounded(tmp_path: Path) -> None:
    """An agent that opens files, writes them and never closes them grew the daemon without
    end (3,000 of 100 KB: +300 MB; temporary names never count toward the store's limit):
    past 256 MiB of open files a write is ENOSPC, said in ``.mnemofs/refusals``, and once
    they are closed the mount takes writes again, and gives the memory back when it rests
    (it kept +127 MB of a burst like this one before it trimmed its heap)."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    service = MemoryService(make_engine(url))
    store = service.create_store("Notes").id
    session = service.create_session([{"memory_store_id": store}], mount_root=str(tmp_path))
    root = tmp_path / "mnt"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 8192), max(hard, 8192)))
    try:
        with mounted(url, session.id, root) as daemon:
            notes = root / "notes"
            before = resident_kib(daemon.process.pid)
            fds: list[int] = []
            refused = None
            try:
                for i in range(4000):
                    fds.append(os.open(notes / f"tmp{i:08d}x", os.O_CREAT | os.O_WRONLY))
                    try:
                        os.write(fds[-1], b"x" * 100_000)
                    except OSError as exc:
                        refused = exc.errno
                        break
            finally:
                for i in range(len(fds)):
                    os.unlink(notes / f"tmp{i:08d}x")  # nothing of them is kept
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            assert refused == errno.ENOSPC
            assert 2000 < len(fds) < 2700, len(fds)  # 256 MiB of 100 KB files, and no more
            newest = (root / ".mnemofs" / "refusals").read_text().splitlines()[0]
            assert f"notes/tmp{len(fds) - 1:08d}x  write: ENOSPC: " in newest, newest
            assert newest.endswith(
                "-> close files you are done with: a mount holds at most 256 MiB of open files"
            ), newest
            (notes / "after.md").write_text("room again\n")
            pid = daemon.process.pid
            # A trim is owed now, due at most TRIM_INTERVAL_S after the last one (which may
            # have come in the middle of the burst, when nothing was free yet).
            gone = wait_for(
                lambda: resident_kib(pid) < before + 64 * 1024, timeout=2 * TRIM_INTERVAL_S + 5
            )
            assert gone, (
                before,
                resident_kib(pid),
            )
        assert service.find_memory(store, "/after.md").content == "room again\n"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        service.close()


def test_a_full_disk_is_enospc_and_keeps_what_was_saved(tmp_path: Path) -> None:
    """The database on a disk that fills up (a small tmpfs): the save that finds no room
    fails its close with ENOSPC, not EIO, and says so in ``.mnemofs/refusals`` (the database's
    disk, not the store, is full); that new file goes, every earlier one stays as saved, and
    once the disk has room again saves work again."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", disk], check=True)
    try:
        url = f"sqlite:///{disk / 'db.sqlite'}"
        service = MemoryService(make_engine(url))
        try:
            store = service.create_store("Notes").id
            session = service.create_session(
                [{"memory_store_id": store}], mount_root=str(tmp_path / "mnt")
            )
            with mounted(url, session.id, tmp_path / "mnt"):
                notes = tmp_path / "mnt" / "notes"
                saved: dict[str, str] = {}
                failed = 0
                for i in range(2000):
                    text = f"note {i}: " + " ".join(f"w{i}x{j}" for j in range(500)) + "\n"
                    try:
                        (notes / f"f{i}.md").write_text(text)
                    except OSError as exc:
                        failed = exc.errno or 0
                        break
                    saved[f"/f{i}.md"] = text
                assert failed == errno.ENOSPC
                assert len(saved) > 5
                newest = (tmp_path / "mnt" / ".mnemofs" / "refusals").read_text().splitlines()[0]
                assert f"notes/f{len(saved)}.md  save at close: ENOSPC: " in newest, newest
                assert "the database's disk is full" in newest, newest
                assert "the store is full" not in newest, newest
                assert sorted(os.listdir(notes)) == sorted(p[1:] for p in saved)
                subprocess.run(["mount", "-o", "remount,size=64m", disk], check=True)
                (notes / "after.md").write_text("room again\n")
                saved["/after.md"] = "room again\n"
                assert {
                    m.path: service.get_memory(store, m.id).content
                    for m in service.list_memories(store)
                    if isinstance(m, Memory)
                } == saved
        finally:
            service.close()
    finally:
        subprocess.run(["umount", "-l", disk], check=False)


def test_other_user_through_allow_other(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = make_engine(db_url)
    service = MemoryService(engine)
    rw = service.create_store("Sandbox").id
    ro = service.create_store("Docs").id
    service.create_memory(ro, "/readme.md", "read me\n")
    root = Path(tempfile.mkdtemp(prefix="mnemofs-other-", dir="/tmp")) / "mnt"
    os.chmod(root.parent, 0o755)  # the other user must reach the mount point
    session = service.create_session(
        [{"memory_store_id": rw}, {"memory_store_id": ro, "access": "read_only"}],
        mount_root=str(root),
    )
    uid = gid = 65534  # nobody
    with mounted(db_url, session.id, root, "--allow-other", "--uid", str(uid), "--gid", str(gid)):
        as_nobody = {"user": "nobody", "check": False}
        assert run("cat", str(root / "docs" / "readme.md"), **as_nobody).stdout == "read me\n"  # type: ignore[arg-type]
        wrote = run("sh", "-c", f"echo hi > {root}/sandbox/note.md", **as_nobody)  # type: ignore[arg-type]
        assert wrote.returncode == 0, wrote.stderr
        refused = run("sh", "-c", f"echo no > {root}/docs/x.md", **as_nobody)  # type: ignore[arg-type]
        assert refused.returncode != 0
        assert "Read-only file system" in refused.stderr
        root_write = run("mkdir", str(root / "x"), **as_nobody)  # type: ignore[arg-type]
        assert root_write.returncode != 0
        assert "Read-only file system" in root_write.stderr
        s = root / "sandbox"
        script = (
            f"set -e; cd {s}; mkdir -p a/b; echo one > a/b/f.md; echo two >> a/b/f.md; "
            "sed -i s/one/ONE/ a/b/f.md; cp a/b/f.md g.md; mv g.md a/h.md; touch t.md; "
            "echo abc > t.md; truncate -s 2 t.md; rm t.md; ls -la a >/dev/null; grep -rq ONE .; "
            "cp -r a c; rm -r c; rmdir a/b 2>/dev/null && exit 9 || true"
        )
        tools = run("sh", "-c", script, **as_nobody)  # type: ignore[arg-type]
        assert tools.returncode == 0, tools.stderr
        assert run("stat", "-c", "%u", str(root / "sandbox" / "note.md")).stdout.strip() == "65534"
    assert service.find_memory(rw, "/note.md").content == "hi\n"
    assert service.find_memory(rw, "/a/b/f.md").content == "ONE\ntwo\n"
    assert service.find_memory(rw, "/a/h.md").content == "ONE\ntwo\n"
    assert {v.created_by.stored for v in service.list_versions(rw)} == {session.id}
    sed_versions = [v.operation for v in service.list_versions(rw) if v.path == "/a/b/f.md"]
    assert sed_versions == ["modified", "modified", "created"]  # echo >, echo >>, sed -i
    service.close()
    engine.dispose()
    shutil.rmtree(root.parent)  # the mount point and the daemon's log


def as_ids(uid: int, gid: int, *argv: str, groups: str = "") -> subprocess.CompletedProcess[str]:
    ids = ["--groups", groups] if groups else ["--clear-groups"]
    return run("setpriv", f"--reuid={uid}", f"--regid={gid}", *ids, *argv, check=False)


def test_other_users_are_refused_reads_unless_the_group_is_let_in(tmp_path: Path) -> None:
    """Owner-only by default: another local user can neither list nor read a memory (EACCES,
    checked by the daemon itself); with --group-access, members of --gid can, others still not."""
    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    service = MemoryService(make_engine(db_url))
    rw = service.create_store("Private").id
    service.create_memory(rw, "/secret.md", "only mine\n")
    root = Path(tempfile.mkdtemp(prefix="mnemofs-private-", dir="/tmp")) / "mnt"
    os.chmod(root.parent, 0o755)  # others reach the mount point; the mount itself says no
    session = service.create_session([{"memory_store_id": rw}], mount_root=str(root))
    owner, group, stranger, member = 4100, 4200, 4300, 4400
    note = str(root / "private" / "secret.md")
    try:
        with mounted(
            db_url, session.id, root, "--allow-other", "--uid", str(owner), "--gid", str(group)
        ):
            # Before the owner looks: what the kernel caches for a second after a lookup
            # (names, sizes) is the one thing it can show without asking the daemon.
            for argv in (
                ("stat", note),
                ("cat", note),
                ("ls", str(root / "private")),
                ("sh", "-c", f"echo x >> {note}"),
            ):
                refused = as_ids(stranger, stranger, *argv)
                assert refused.returncode != 0, argv
                assert "Permission denied" in refused.stderr, (argv, refused.stderr)
            assert as_ids(member, member, "cat", note, groups=str(group)).returncode != 0
            assert as_ids(owner, owner, "cat", note).stdout == "only mine\n"
            # Content and listings are asked for at every open: refused even now.
            assert "Permission denied" in as_ids(stranger, stranger, "cat", note).stderr
            assert (
                "Permission denied"
                in as_ids(stranger, stranger, "ls", str(root / "private")).stderr
            )
        with mounted(
            db_url,
            session.id,
            root,
            "--allow-other",
            "--uid",
            str(owner),
            "--gid",
            str(group),
            "--group-access",
        ):
            assert oct(os.stat(note).st_mode & 0o777) == "0o660"
            assert as_ids(member, member, "cat", note, groups=str(group)).stdout == "only mine\n"
            assert as_ids(member, group, "sh", "-c", f"echo more >> {note}").returncode == 0
            assert as_ids(stranger, stranger, "cat", note).returncode != 0
    finally:
        service.close()
        shutil.rmtree(root.parent)
    assert service.find_memory(rw, "/secret.md").content == "only mine\nmore\n"


def test_full_store_says_enospc_but_temporary_files_still_work(env: Env) -> None:
    """The 10,001st memory is refused at open(O_CREAT); sed -i still works in a full store."""
    for i in range(9_999):  # plus /notes/todo.md: exactly the limit
        env.service.create_memory(env.rw_id, f"/bulk/{i // 500}/m{i}.md", "x", actor="cli")
    assert wait_for(lambda: (env.rw / "bulk" / "19" / "m9998.md").exists(), timeout=10.0)
    time.sleep(0.6)  # two change-watcher ticks: the mount has also seen the final count
    before = len(env.service.list_versions(env.rw_id, limit=5).data)
    assert errno_of(os.open, env.rw / "one-more.md", os.O_CREAT | os.O_WRONLY) == errno.ENOSPC
    run("sed", "-i", "s/milk/juice/", str(env.rw / "notes" / "todo.md"))
    assert env.memory("/notes/todo.md").content == "- buy juice\n"
    assert env.service.get_store(env.rw_id).memory_count == 10_000
    assert len(env.service.list_versions(env.rw_id, limit=5).data) == before


def test_an_edit_that_keeps_a_backup_keeps_the_path_s_history(env: Env) -> None:
    """``sed -i.bak`` renames the file to its backup, then its output over the name. The name
    keeps its memory and history (one new version), and the backup is a new memory with the
    old text; so with Emacs' ``f~`` and a new file written at the name. A rename to another
    name, then a new file at the old one, is two memories."""
    notes = env.rw / "notes"
    todo = env.memory("/notes/todo.md")
    run("sed", "-i.bak", "s/milk/bread/", str(notes / "todo.md"))
    assert (notes / "todo.md").read_text() == "- buy bread\n"
    assert (notes / "todo.md.bak").read_text() == "- buy milk\n"
    assert env.memory("/notes/todo.md").id == todo.id
    backup = env.memory("/notes/todo.md.bak")
    assert backup.id != todo.id
    assert backup.content == "- buy milk\n"
    assert os.getxattr(notes / "todo.md.bak", "user.mnemofs.memory_id").decode() == backup.id
    assert len(os.listdir(env.rw / ".history" / "notes" / "todo.md")) == 3  # made, away, back
    assert len(os.listdir(env.rw / ".history" / "notes" / "todo.md.bak")) == 1
    os.rename(notes / "todo.md", notes / "todo.md~")  # Emacs: the backup, then a new file
    (notes / "todo.md").write_text("- buy bread and jam\n")
    assert env.memory("/notes/todo.md").id == todo.id
    assert env.memory("/notes/todo.md~").content == "- buy bread\n"
    os.rename(notes / "todo.md", notes / "done.md")
    (notes / "todo.md").write_text("- a new list\n")
    assert env.memory("/notes/done.md").id == todo.id
    assert env.memory("/notes/todo.md").id not in (todo.id, backup.id)


def test_perl_s_backup_keeps_the_path_s_history_too(env: Env) -> None:
    """``perl -i.bak`` writes its output to a file with a name like any other (saved as a
    memory of its own), renames the file to its backup, then its output to the name: the
    name keeps its memory, the output's own short history is folded away, as a temporary
    file's is, and the backup is a new memory."""
    notes = env.rw / "notes"
    todo = env.memory("/notes/todo.md")
    run("perl", "-pi.bak", "-e", "s/milk/tea/", str(notes / "todo.md"))
    assert sorted(os.listdir(notes)) == ["todo.md", "todo.md.bak"]
    assert (notes / "todo.md").read_text() == "- buy tea\n"
    assert env.memory("/notes/todo.md").id == todo.id
    assert env.memory("/notes/todo.md.bak").content == "- buy milk\n"
    assert env.paths() == ["/notes/todo.md", "/notes/todo.md.bak"]
    ids = {v.memory_id for v in env.service.list_versions(env.rw_id, limit=50).data}
    assert len(ids) == 2  # the path's memory and the backup: perl's output left no history
