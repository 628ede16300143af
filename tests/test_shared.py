"""Several mounts of one store and the CLI, written at once: every acknowledged save is a
version, in commit order, and every mount shows the last one."""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mnemofs.errors import NotFound
from mnemofs.store import Engine, MemoryService

from . import walks
from .mounted import errno_of, mounted, wait_for
from .walks import Walk

pytestmark = pytest.mark.mounted

WRITER = textwrap.dedent(
    """
    import json, os, sys
    path, shared, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    done = []
    for i in range(count):
        for target in (path, shared):
            text = f"{tag} {i}\\n"
            with open(target, "w") as f:
                f.write(text)
            done.append([os.path.basename(target), text])  # acknowledged: close returned
    print(json.dumps(done))
    """
)


def test_two_mounts_lose_no_save(engine: Engine, db_url: str, tmp_path: Path) -> None:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Shared").id
    roots = [tmp_path / "m1", tmp_path / "m2"]
    sessions = [
        service.create_session([{"memory_store_id": store}], mount_root=str(r)) for r in roots
    ]
    with mounted(db_url, sessions[0].id, roots[0]), mounted(db_url, sessions[1].id, roots[1]):
        # One writer per mount: writers in one mount share each file's buffer, as processes
        # on any filesystem share a file, so their saves interleave by design.
        writers = enumerate(roots)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WRITER,
                    str(root / "shared" / f"own-{w}.md"),
                    str(root / "shared" / "both.md"),
                    f"w{w}",
                    "40",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w, root in writers
        ]
        outputs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
        acknowledged = [json.loads(out) for out, _ in outputs]
        # Each mount shows the other's files within a second.
        assert wait_for(lambda: (roots[1] / "shared" / "own-0.md").exists(), timeout=2.0)
        assert wait_for(lambda: (roots[0] / "shared" / "own-1.md").exists(), timeout=2.0)

    saved: dict[str, list[str | None]] = {}
    for version in reversed(list(service.list_versions(store))):
        content = service.get_version(store, version.id).content
        saved.setdefault(version.path.lstrip("/"), []).append(content)
    for w, acks in enumerate(acknowledged):
        own = [text for name, text in acks if name == f"own-{w}.md"]
        # Every save of a writer's own file, in order (identical saves make no version).
        assert saved[f"own-{w}.md"] == own, w
    both_acked = {text for acks in acknowledged for name, text in acks if name == "both.md"}
    both_saved = [c for c in saved["both.md"] if c is not None]
    assert set(both_saved) == both_acked  # none lost, none invented
    head = service.find_memory(store, "/both.md")
    assert head.content == both_saved[-1]  # the last commit is the head
    service.close()


# A hammer writer records, for every acknowledged save, the monotonic clock (one clock for
# every process on the machine) just before it began and just after close() returned.
HAMMER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    kind, where, tag, shared, seconds = sys.argv[1:6]
    stop = time.monotonic() + float(seconds)
    out, i, made = [], 0, {"shared.md"}
    while time.monotonic() < stop:
        i += 1
        name = "shared.md" if shared == "1" and i % 2 else f"{tag}-{i % 3}.md"
        text = f"{tag} {i}\\n" + f"{tag}/{i} " * (i % 200) + "\\n"
        began = time.monotonic()
        if kind == "cli":
            db, store = where.split(" ", 1)
            base = [sys.executable, "-m", "mnemofs", "--db", db, "memories"]
            verb = "update" if name in made else "create"
            made.add(name)
            cmd = [*base, verb, store, "/" + name, "--content", text]
            subprocess.run(cmd, check=True, capture_output=True)
        elif i % 3 == 0:  # the sed -i way: a temporary file renamed over the target
            tmp = os.path.join(where, f".{name}.{i}.tmp")
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, os.path.join(where, name))
        else:
            with open(os.path.join(where, name), "w") as f:
                f.write(text)
        out.append([name, text, began, time.monotonic()])
    print(json.dumps(out))
    """
)
HAMMER_SECONDS = float(os.environ.get("MNEMOFS_HAMMER_SECONDS", "30"))


def test_two_mounts_and_the_cli_hammer_one_store(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Hammered").id
    service.create_memory(store, "/shared.md", "seed\n")
    roots = [tmp_path / "m1", tmp_path / "m2"]
    sessions = [
        service.create_session([{"memory_store_id": store}], mount_root=str(r)) for r in roots
    ]
    with mounted(db_url, sessions[0].id, roots[0]), mounted(db_url, sessions[1].id, roots[1]):
        # Per mount, one writer shares shared.md with the other mount and the CLI, one only
        # writes its own files (two writers of one file in one mount share its buffer).
        jobs = [
            ("fs", str(root / "hammered"), f"m{m}w{w}", str(int(w == 0)))
            for m, root in enumerate(roots)
            for w in range(2)
        ]
        jobs.append(("cli", f"{db_url} {store}", "cli", "1"))
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", HAMMER, *job, str(HAMMER_SECONDS)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for job in jobs
        ]
        outputs = [p.communicate(timeout=HAMMER_SECONDS + 120) for p in procs]
        assert [p.returncode for p in procs] == [0] * len(procs), [e[-2000:] for _, e in outputs]
        acked = [tuple(save) for out, _ in outputs for save in json.loads(out)]

        history = [
            (v.path.lstrip("/"), service.get_version(store, v.id).content)
            for v in reversed(list(service.list_versions(store)))  # commit order
        ]
        # Every acknowledged save is a version, and there is no other version.
        assert history[0] == ("shared.md", "seed\n")
        assert sorted(history[1:], key=str) == sorted(((n, t) for n, t, _, _ in acked), key=str)
        # In commit order: a save acknowledged before another began committed first.
        order = {(n, t): seq for seq, (n, t) in enumerate(history)}
        by_commit = sorted(acked, key=lambda s: order[(s[0], s[1])])
        later_end = float("inf")
        for name, text, began, ended in reversed(by_commit):
            assert later_end >= began, f"{name}: {text[:20]!r} committed after a later save"
            later_end = min(later_end, ended)
        # The last commit is the head, and both mounts show it.
        heads = {name: text for name, text in history}
        for name, text in heads.items():
            assert service.find_memory(store, "/" + name).content == text
            for root in roots:
                shown = root / "hammered" / name
                assert wait_for(lambda f=shown, t=text: f.read_text() == t), (root, name)  # type: ignore[misc]
        print(f"hammer: {len(acked)} saves in {HAMMER_SECONDS:.0f} s")
    assert service.check().problems == []
    service.close()


@pytest.mark.parametrize("renamed", ["file", "directory"])
@pytest.mark.parametrize("writes", ["after", "both", "before"])
def test_an_open_file_follows_a_rename_made_elsewhere(
    engine: Engine, db_url: str, tmp_path: Path, renamed: str, writes: str
) -> None:
    """A file held open here (an agent's log, appended to) is renamed elsewhere, on its own or
    with its directory: the descriptor goes on writing the same file, as it does on a file
    another process renamed, and its close saves to the memory at its new path. Its writes
    come after the mount shows the rename, or before and after, or before only, closed at
    once (the save finds the memory moved before the mount looked). The writes after it were
    dropped with close() answering 0 (the mount had swapped the file for a new one at the new
    path); those before it were saved, but the mount showed the file at its old path for
    good."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Moving").id
    memory = service.create_memory(store, "/d/log.md", "line1\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    old, new = ("d/log.md", "d/moved.md") if renamed == "file" else ("d/log.md", "e/log.md")
    with mounted(db_url, session.id, root):
        folder = root / "moving"
        fd = os.open(folder / old, os.O_WRONLY | os.O_APPEND)
        try:
            if writes != "after":
                os.write(fd, b"early\n")
            if renamed == "file":
                service.update_memory(store, memory.id, path="/" + new)
            else:
                service.move_directory(store, "/d", "/e")
            if writes != "before":
                assert wait_for(lambda: (folder / new).exists() and not (folder / old).exists())
                os.write(fd, b"line2\n")
        finally:
            os.close(fd)
        text = {"after": "line1\nline2\n", "both": "line1\nearly\nline2\n"}.get(
            writes, "line1\nearly\n"
        )
        assert service.find_memory(store, "/" + new).content == text
        assert [m.path for m in service.list_memories(store)] == ["/" + new]
        assert wait_for(lambda: (folder / new).exists() and not (folder / old).exists())
        assert (folder / new).read_text() == text
        # A rename saves no content: the save over it replaced nobody's work.
        assert "LOST UPDATE?" not in (root / ".mnemofs" / "changes").read_text()
    service.close()


def _just_looked(service: MemoryService, store: str, folder: Path) -> None:
    """Return right after the mount looked for changes (an API change to a file of its own,
    waited for): it looks again no sooner than 50 ms later (``LOOK_INTERVAL_S``), so what a
    test does next through it comes before the mount has seen what the test did elsewhere."""
    beacon = f"{time.monotonic_ns()}\n"
    try:
        memory = service.find_memory(store, "/beacon.md")
        service.update_memory(store, memory.id, content=beacon)
    except NotFound:
        service.create_memory(store, "/beacon.md", beacon)
    assert wait_for(lambda: (folder / "beacon.md").exists() and shows(folder / "beacon.md", beacon))


def shows(path: Path, text: str) -> bool:
    try:
        return path.read_text() == text
    except OSError:
        return False


@pytest.mark.parametrize("gone", ["deleted", "renamed"])
def test_a_save_that_follows_its_file_into_a_folder_where_a_file_was_shows_it(
    engine: Engine, db_url: str, tmp_path: Path, gone: str
) -> None:
    """Another writer removes ``x`` (deletes it, or renames it away) and moves ``b.md``, held
    open here, to ``x/y.md``; the close here comes before the mount looked. Its save goes to
    the memory, and the file follows it into the folder ``x``, where the mount still had the
    file ``x``: the file went under the file, and when the mount heard of ``x``'s removal
    both left it, for good (``x/y.md`` in the store, nothing in the mount)."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Over").id
    x = service.create_memory(store, "/x", "ex\n")
    b = service.create_memory(store, "/b.md", "b\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "over"
        fd = os.open(folder / "b.md", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"more\n")
            _just_looked(service, store, folder)
            if gone == "deleted":
                service.delete_memory(store, x.id)
            else:
                service.update_memory(store, x.id, path="/z.md")
            service.update_memory(store, b.id, path="/x/y.md")
        finally:
            os.close(fd)
        want = {"/beacon.md", "/x/y.md"} | ({"/z.md"} if gone == "renamed" else set())
        assert {m.path for m in service.list_memories(store)} == want
        assert service.find_memory(store, "/x/y.md").content == "b\nmore\n"
        assert wait_for(lambda: set(walks.files(folder)) == want), walks.files(folder)
        assert (folder / "x" / "y.md").read_text() == "b\nmore\n"
    service.close()


def test_a_new_file_not_saved_yet_where_files_arrive_under_its_name_fails_its_close(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A program here writes a new file ``x``, not closed yet; another writer makes ``x/y.md``
    (the store has never heard of ``x``). The mount shows the folder, and the close here says
    that the file could not be saved (a memory cannot sit where a folder is), rather than
    dropping it with 0; ``y.md`` went under the file before, for good."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Under").id
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "under"
        fd = os.open(folder / "x", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, b"mine\n")
            service.create_memory(store, "/x/y.md", "theirs\n")
            assert wait_for(lambda: shows(folder / "x" / "y.md", "theirs\n"))
        finally:
            assert errno_of(os.close, fd) == errno.EEXIST
        assert [m.path for m in service.list_memories(store)] == ["/x/y.md"]
        assert walks.files(folder) == {"/x/y.md": "theirs\n"}
    service.close()


@pytest.mark.parametrize("how", ["last memory deleted", "rmdir", "folder moved", "nested"])
def test_a_folder_removed_elsewhere_leaves_the_mount(
    engine: Engine, db_url: str, tmp_path: Path, how: str
) -> None:
    """Another writer takes a folder away: deletes the last memory of a folder only its
    memories made, removes an empty folder made with mkdir, moves a folder elsewhere, or
    deletes the one memory two folders down. Within the spec's second the mount no longer
    shows it either (it used to until this mount's own rmdir, or a remount). A folder the
    store still keeps stays: one made with mkdir whose files went, one this mount emptied
    with ``rm``, and one whose only subfolder this mount removed with ``rmdir``."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Gone").id
    kept = service.make_directory(store, "/kept")
    lone = service.create_memory(store, "/kept/lone.md", "lone\n")
    service.create_memory(store, "/mine/last.md", "last\n")
    service.make_directory(store, "/nest/sub")
    if how == "rmdir":
        service.make_directory(store, "/d")
    else:
        service.create_memory(store, "/d/a.md", "a\n")
        service.create_memory(store, "/d/e/b.md" if how == "nested" else "/d/b.md", "b\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "gone"
        (folder / "mine" / "last.md").unlink()
        (folder / "nest" / "sub").rmdir()
        assert (folder / "d").is_dir()
        service.delete_memory(store, lone.id)
        by_path = {m.path: m for m in service.list_memories(store)}
        if how == "last memory deleted":
            for path in ("/d/a.md", "/d/b.md"):
                service.delete_memory(store, by_path[path].id)
        elif how == "rmdir":
            service.remove_directory(store, "/d")
        elif how == "folder moved":
            service.move_directory(store, "/d", "/f/d")
        else:
            service.delete_memory(store, by_path["/d/a.md"].id)
            service.delete_memory(store, by_path["/d/e/b.md"].id)
        want = walks.stored_directories(service, store)
        assert "/d/" not in want
        assert {"/kept/", "/mine/", "/nest/"} <= want
        assert wait_for(lambda: walks.directories(folder) == want), walks.directories(folder)
        assert walks.files(folder) == walks.stored(service, store)
        assert not (folder / "d").exists()
        assert kept.path in walks.directories(folder)
    service.close()


def test_a_working_directory_removed_elsewhere_takes_no_new_file(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A shell works in ``notes/d``; another writer moves ``/d`` to ``/old/d``. Its next
    ``echo > x.md`` is refused (no such directory, as in a directory removed under it), where
    it used to make ``/d/x.md`` in the store, bringing back the folder just moved away."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Cwd").id
    service.create_memory(store, "/d/a.md", "a\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "cwd"
        shell = subprocess.Popen(
            ["sh", "-c", "read go; echo x > x.md; echo $?; mkdir e; echo $?"],
            cwd=folder / "d",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            service.move_directory(store, "/d", "/old/d")
            assert wait_for(lambda: not (folder / "d").exists())
            out, err = shell.communicate("go\n", timeout=30)
        finally:
            if shell.poll() is None:
                shell.kill()
                shell.wait()
        assert out.split() == ["2", "1"], err  # sh: a failed redirection is 2
        assert "No such file or directory" in err
        assert walks.stored(service, store) == {"/old/d/a.md": "a\n"}
        assert walks.files(folder) == {"/old/d/a.md": "a\n"}
    service.close()


@pytest.mark.parametrize("how", ["saved", "replaced"])
def test_a_failed_save_over_a_file_saved_elsewhere_shows_their_bytes(
    engine: Engine, db_url: str, tmp_path: Path, how: str
) -> None:
    """A program here appends to ``b.md`` and has not closed it; another writer saves it (or
    deletes it and makes a new ``b.md``); then a write here is refused (a NUL byte:
    ``EILSEQ``), so its close saves nothing. The file is put back as the store has it, their
    bytes: it used to go back to the bytes this mount last saved, and show them until the
    file changed again (found by the wider walk, both ways)."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Undo").id
    b = service.create_memory(store, "/b.md", "mine\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "undo"
        assert (folder / "b.md").read_text() == "mine\n"
        fd = os.open(folder / "b.md", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"more\n")
            if how == "saved":
                service.update_memory(store, b.id, content="theirs\n")
            else:
                service.delete_memory(store, b.id)
                service.create_memory(store, "/b.md", "theirs\n")
            _just_looked(service, store, folder)
            assert errno_of(os.write, fd, b"\0") == errno.EILSEQ
        finally:
            assert errno_of(os.close, fd) == errno.EILSEQ
        assert service.find_memory(store, "/b.md").content == "theirs\n"
        assert (folder / "b.md").read_text() == "theirs\n"
    service.close()


@pytest.mark.parametrize("reading", [False, True], ids=["closed", "open"])
def test_a_save_where_another_writer_just_moved_a_file_leaves_no_second_copy(
    engine: Engine, db_url: str, tmp_path: Path, reading: bool
) -> None:
    """The API renames a.md to b.md; before the mount has looked, a program here writes b.md,
    which it believes new. The save goes to the memory now at b.md (its other writer's file,
    as a shared file would), and a.md, the same memory where it was, leaves the mount (if a
    reader holds it open, at its close): it stayed for good, with the memory's old bytes,
    beside b.md."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Twins").id
    memory = service.create_memory(store, "/a.md", "old\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "twins"
        assert (folder / "a.md").read_text() == "old\n"
        reader = os.open(folder / "a.md", os.O_RDONLY) if reading else None
        _just_looked(service, store, folder)
        service.update_memory(store, memory.id, path="/b.md")
        (folder / "b.md").write_text("mine\n")
        assert service.get_memory(store, memory.id).content == "mine\n"
        if reader is not None:
            os.close(reader)
        assert wait_for(lambda: not (folder / "a.md").exists())
        assert sorted(os.listdir(folder)) == ["b.md", "beacon.md"]
        assert (folder / "b.md").read_text() == "mine\n"
    service.close()


@pytest.mark.parametrize("over", [False, True], ids=["rename", "rename-over"])
def test_a_rename_here_of_a_file_just_saved_elsewhere_shows_their_bytes(
    engine: Engine, db_url: str, tmp_path: Path, over: bool
) -> None:
    """The API saves x.md; before the mount has looked, a program here renames x.md (to a new
    name, or over y.md as ``os.replace`` does). The store moved the other writer's bytes, the
    last saved, and the mount shows them. It showed the bytes it had, under the new bytes'
    size, for good: the rename was the memory's last change, its own, taken as shown."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Renames").id
    memory = service.create_memory(store, "/x.md", "old\n")
    service.create_memory(store, "/y.md", "target\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "renames"
        assert (folder / "x.md").read_text() == "old\n"
        _just_looked(service, store, folder)
        theirs = "their longer bytes\n"
        service.update_memory(store, memory.id, content=theirs)
        target = folder / ("y.md" if over else "z.md")
        os.rename(folder / "x.md", target)
        assert service.find_memory(store, "/" + target.name).content == theirs
        assert wait_for(lambda: shows(target, theirs))
        assert os.stat(target).st_size == len(theirs)
    service.close()


def test_a_folder_renamed_here_as_it_was_elsewhere_loses_no_file(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """The API moves folder d to h; before the mount has looked, a program here renames d to
    h too, with d/e.md open and unsaved. The rename saves e.md first: its memory is at h/e.md
    now, and the file goes there, so h is no longer free: ENOTEMPTY, and the mount shows what
    the store holds. The rename went on over that new h, which took e.md out of the mount
    for good (found by the random walk below, in CI)."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Folders").id
    service.create_memory(store, "/d/e.md", "one\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "folders"
        fd = os.open(folder / "d" / "e.md", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"two\n")
            _just_looked(service, store, folder)
            service.move_directory(store, "/d", "/h")
            assert errno_of(os.rename, folder / "d", folder / "h") == errno.ENOTEMPTY
        finally:
            os.close(fd)
        # The refusal moved nothing: the store holds what the API's move and the save left.
        # The mount shows it: e.md under h, and d, emptied and no longer the store's, gone
        # once the mount looks (it may have looked already).
        assert sorted(m.path for m in service.list_memories(store)) == ["/beacon.md", "/h/e.md"]
        assert service.find_memory(store, "/h/e.md").content == "one\ntwo\n"
        assert wait_for(lambda: shows(folder / "h" / "e.md", "one\ntwo\n"))
        assert wait_for(lambda: not (folder / "d").exists())
    service.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_mounts_and_the_api_agree_after_a_random_walk(
    engine: Engine, db_url: str, tmp_path: Path, seed: int
) -> None:
    """Two mounts of one store and the API change a handful of files at random: saves,
    appends, renames of files and directories, deletes, and descriptors held open across
    steps that write and close later. Whenever no descriptor is open, both mounts show, within
    the spec's second, exactly the files the store holds. Each change's outcome is not checked
    (the mounts see each other late, so a rename may find nothing): only that the three agree.
    This walk found a rename elsewhere dropping an open descriptor's writes, a mount showing
    old bytes after a rename of a file just saved elsewhere, and a second copy of a moved
    file."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Walk").id
    roots = [tmp_path / "m1", tmp_path / "m2"]
    sessions = [
        service.create_session([{"memory_store_id": store}], mount_root=str(r)) for r in roots
    ]
    walk = Walk(random.Random(seed))
    held: list[tuple[int, str]] = []

    def stored() -> dict[str, str]:
        return {m.path: m.content or "" for m in service.list_memories(store, view="full")}

    def agree() -> bool:
        return walks.files(folders[0]) == walks.files(folders[1]) == stored()

    def apart() -> str:
        shown = "\n".join(f"m{n + 1}:    {walks.files(f)}" for n, f in enumerate(folders))
        return f"seed {seed}\nstore: {stored()}\n{shown}\nlast steps:\n{walk.last()}"

    with mounted(db_url, sessions[0].id, roots[0]), mounted(db_url, sessions[1].id, roots[1]):
        folders = [root / "walk" for root in roots]
        rng = walk.rng
        for i in range(150):
            which = rng.randrange(2)
            folder, name, text = folders[which], rng.choice(walks.NAMES), f"{i}\n"
            at, other = f"m{which + 1} {name}", rng.choice(walks.NAMES)
            roll = rng.random()
            if walk.on_files(folder, name, other, text, roll):
                pass
            elif roll < 0.58:
                try:
                    held.append((os.open(folder / name, os.O_RDWR | os.O_APPEND), at))
                    walk.steps.append(f"open {at}: ok")
                except OSError as exc:
                    walk.steps.append(f"open {at}: {errno.errorcode.get(exc.errno or 0)}")
            elif roll < 0.7 and held:
                fd, was = rng.choice(held)
                walk.step(f"write {text.strip()} to {was}", os.write, fd, text.encode())
            elif roll < 0.78 and held:
                fd, was = held.pop(rng.randrange(len(held)))
                walk.step(f"close {was}", os.close, fd)
            elif roll < 0.9:
                walk.through_api(service, store, name, other, text, create=False)
            else:
                time.sleep(rng.choice([0.0, 0.02, 0.1]))  # the mounts see each other, or not
            if not held and rng.random() < 0.15:
                assert wait_for(agree), apart()
        for fd, _ in held:
            os.close(fd)
        assert wait_for(agree), apart()
    service.close()


# A change through a read_only store's mount is refused; these are how (the kernel's own
# answers come first: a name that is not there, a folder moved into itself).
READ_ONLY = {errno.EROFS, errno.ENOENT, errno.EEXIST, errno.EINVAL, errno.ENOTDIR}


@pytest.mark.parametrize("seed", [1, 2])
def test_two_mounts_of_two_stores_and_the_api_agree_after_a_wider_walk(
    engine: Engine, db_url: str, tmp_path: Path, seed: int
) -> None:
    """The walk above, wider: folders in folders, ``mkdir`` and ``rmdir`` (through the API
    too), truncation, ``sed -i``, a temporary renamed over a file, writes at an offset and
    ``ftruncate`` through held descriptors, the API's creates; and a second store, attached
    read_write to one mount and read_only to the other. Whenever no descriptor is open, both
    mounts show exactly each store's files and directories. Every change through the read_only
    mount is refused, and every rename from one store to the other (``EXDEV``)."""
    service = MemoryService(engine, actor="api")
    stores = {"walk": service.create_store("Walk").id, "other": service.create_store("Other").id}
    roots = [tmp_path / "m1", tmp_path / "m2"]
    sessions = [
        service.create_session(
            [
                {"memory_store_id": stores["walk"]},
                {"memory_store_id": stores["other"], "access": access},
            ],
            mount_root=str(root),
        )
        for root, access in zip(roots, ["read_write", "read_only"], strict=True)
    ]
    walk = Walk(random.Random(seed), walks.WIDE_NAMES, walks.WIDE_DIRS)
    held: list[tuple[int, str]] = []

    def agree() -> bool:
        for slug, store in stores.items():
            shown = [walks.files(root / slug) for root in roots]
            if not shown[0] == shown[1] == walks.stored(service, store):
                return False
            have = walks.stored_directories(service, store)
            if not all(have == walks.directories(root / slug) for root in roots):
                return False
        return True

    def apart() -> str:
        sides = [
            f"{slug}: {walks.stored(service, store)} {walks.stored_directories(service, store)}"
            + "".join(
                f"\n  m{n + 1}: {walks.files(r / slug)} {walks.directories(r / slug)}"
                for n, r in enumerate(roots)
            )
            for slug, store in stores.items()
        ]
        return f"seed {seed}\n" + "\n".join(sides) + f"\nlast steps:\n{walk.last()}"

    with mounted(db_url, sessions[0].id, roots[0]), mounted(db_url, sessions[1].id, roots[1]):
        rng = walk.rng
        for i in range(200):
            which, slug = rng.randrange(2), rng.choice(["walk", "walk", "other"])
            folder, name, text = roots[which] / slug, rng.choice(walk.names), f"{i}\n"
            at, other, roll = f"m{which + 1} {slug}/{name}", rng.choice(walk.names), rng.random()
            read_only = which == 1 and slug == "other"
            if roll < 0.5:
                if roll < 0.25:
                    walk.on_files(folder, name, other, text, roll * 2)
                else:
                    walk.on_more(folder, name, text, (roll - 0.25) * 4)
                if read_only:  # refused (the kernel answers a rename onto itself 0 itself)
                    what, outcome = walk.steps[-1].rsplit(": ", 1)
                    refused = {errno.errorcode[e] for e in READ_ONLY}
                    assert outcome in refused or what.startswith("rename"), walk.last()
            elif roll < 0.53:
                into = roots[which] / ("walk" if slug == "other" else "other") / other
                code = walk.step(f"rename {at} to the other store", os.rename, folder / name, into)
                assert code in (errno.EXDEV, errno.ENOENT, errno.EROFS), walk.last()
            elif roll < 0.6 and not read_only:
                try:
                    flags = os.O_RDWR | (os.O_APPEND if rng.random() < 0.6 else 0)
                    held.append((os.open(folder / name, flags), at))
                    walk.steps.append(f"open {at}: ok")
                except OSError as exc:
                    walk.steps.append(f"open {at}: {errno.errorcode.get(exc.errno or 0)}")
            elif roll < 0.68 and held:
                fd, was = rng.choice(held)
                kind = rng.random()
                if kind < 0.6:
                    walk.step(f"write {text.strip()} to {was}", os.write, fd, text.encode())
                elif kind < 0.8:
                    offset = rng.randrange(5)
                    walk.step(f"write at {offset} to {was}", os.pwrite, fd, text.encode(), offset)
                else:
                    walk.step(f"ftruncate {was}", os.ftruncate, fd, min(2, os.fstat(fd).st_size))
            elif roll < 0.74 and held:
                fd, was = held.pop(rng.randrange(len(held)))
                walk.step(f"close {was}", os.close, fd)
            elif roll < 0.9:
                store = stores[slug]
                if rng.random() < 0.7:
                    walk.through_api(service, store, name, other, text, create=False)
                else:
                    walk.more_through_api(service, store, name, text)
            else:
                time.sleep(rng.choice([0.0, 0.02, 0.1]))
            if not held and rng.random() < 0.12:
                assert wait_for(agree), apart()
        for fd, was in held:
            walk.step(f"close {was}", os.close, fd)  # EILSEQ after a refused write
        assert wait_for(agree), apart()
        by = {v.created_by.id for v in service.list_versions(stores["other"]) if v.created_by}
        assert sessions[1].id not in by  # nothing went through the read_only mount
    service.close()
