"""Sync mode with real processes and a real folder, on both backends: `mnemofs sync`."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mnemofs.errors import Conflict, NotFound, Unavailable
from mnemofs.folder import Folder
from mnemofs.models import Memory
from mnemofs.store import Engine, MemoryService
from mnemofs.sync import SyncWorker

from . import walks
from .mounted import run, wait_for
from .walks import Walk


class Env:
    def __init__(self, engine: Engine, db_url: str, tmp_path: Path) -> None:
        self.db_url = db_url
        self.service = MemoryService(engine, actor="api")
        self.notes = self.service.create_store("Notes").id
        self.docs = self.service.create_store("Docs").id
        self.service.create_memory(self.notes, "/a.md", "alpha\n")
        self.service.create_memory(self.docs, "/readme.md", "read me\n")
        self.root = tmp_path / "memory"
        self.session = self.service.create_session(
            [
                {"memory_store_id": self.notes},
                {"memory_store_id": self.docs, "access": "read_only"},
            ],
            mount_root=str(self.root),
        )

    def argv(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "mnemofs",
            "--db",
            self.db_url,
            "sync",
            "--session",
            self.session.id,
            *extra,
        ]

    def once(self, interval: float = 15, *, in_step: bool = True) -> str:
        """A ``--once`` run's output; it exits 1 when anything is left out of step."""
        done = subprocess.run(
            self.argv("--once", "--interval", str(interval)), capture_output=True, text=True
        )
        assert done.returncode == (0 if in_step else 1), done.stderr
        if not in_step:
            assert f"out of step: see {self.root / '.mnemofs-sync-errors'}" in done.stderr
        return done.stdout + done.stderr

    def stored(self, store: str) -> dict[str, str]:
        return {
            m.path: self.service.find_memory(store, m.path).content or ""
            for m in self.service.list_memories(store)
        }

    def versions(self, store: str) -> list[tuple[str, str, str]]:
        return [
            (v.operation, v.path, v.created_by.stored) for v in self.service.list_versions(store)
        ]


def make(engine: Engine, db_url: str, tmp_path: Path) -> Env:
    return Env(engine, db_url, tmp_path)


def _watching(engine: Engine, env: Env) -> tuple[MemoryService, SyncWorker]:
    """A worker in this process (an interval of 0.5 s) that watches the folder through
    inotify, after its first passes: the first look, the watches, the full look after them."""
    service = MemoryService(engine, actor=env.session.id)
    worker = SyncWorker(service, env.session, env.root, interval=0.5)
    worker.watch_local_changes()
    for _ in range(3):
        worker.reconcile()
    return service, worker


def test_local_edits_with_ordinary_tools_become_versions(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    env = make(engine, db_url, tmp_path)
    env.once()
    notes = env.root / "notes"
    assert (notes / "a.md").read_text() == "alpha\n"
    assert (env.root / "docs" / "readme.md").read_text() == "read me\n"
    run(
        "sh",
        "-c",
        "echo beta > b.md && sed -i s/alpha/ALPHA/ a.md && mkdir -p d && echo gamma > d/c.md",
        cwd=notes,
    )
    env.once()
    assert env.stored(env.notes) == {"/a.md": "ALPHA\n", "/b.md": "beta\n", "/d/c.md": "gamma\n"}
    mine = [v for v in env.versions(env.notes) if v[2] == env.session.id]
    assert sorted(mine) == [
        ("created", "/b.md", env.session.id),
        ("created", "/d/c.md", env.session.id),
        ("modified", "/a.md", env.session.id),
    ]
    # Restart resumes from the state file: nothing changed, nothing uploaded again.
    before = len(env.versions(env.notes))
    assert "nothing to do" in env.once()
    assert len(env.versions(env.notes)) == before
    # Remote changes come down.
    env.service.update_memory(
        env.notes, env.service.find_memory(env.notes, "/b.md").id, content="from the api\n"
    )
    env.service.create_memory(env.notes, "/e.md", "new remote\n")
    env.service.delete_memory(env.notes, env.service.find_memory(env.notes, "/d/c.md").id)
    env.once()
    assert (notes / "b.md").read_text() == "from the api\n"
    assert (notes / "e.md").read_text() == "new remote\n"
    assert not (notes / "d" / "c.md").exists()
    env.service.close()


def test_both_sides_changed_keeps_both(engine: Engine, db_url: str, tmp_path: Path) -> None:
    env = make(engine, db_url, tmp_path)
    env.once()
    (env.root / "notes" / "a.md").write_text("local edit\n")
    memory = env.service.update_memory(
        env.notes, env.service.find_memory(env.notes, "/a.md").id, content="remote edit\n"
    )
    env.once()
    side = f"/a.conflict-{memory.memory_version_id}.md"
    assert (env.root / "notes" / "a.md").read_text() == "remote edit\n"  # the head stays
    assert (env.root / "notes" / side.lstrip("/")).read_text() == "local edit\n"
    assert env.stored(env.notes) == {"/a.md": "remote edit\n", side: "local edit\n"}
    env.service.close()


def test_a_move_in_the_folder_keeps_the_memory_and_its_history(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """``mv`` of a file or a directory moves its memory, as a mount's rename does; what cannot
    be told apart (empty files), or changed in the store meanwhile, is not taken for a move."""
    env = make(engine, db_url, tmp_path)
    for path, text in [("/d/x.md", "ex\n"), ("/d/y.md", "why\n"), ("/c.md", "see\n")]:
        env.service.create_memory(env.notes, path, text)
    env.service.create_memory(env.notes, "/e1.md", "")
    env.service.create_memory(env.notes, "/e2.md", "")
    ids = {m.path: m.id for m in env.service.list_memories(env.notes)}
    env.once(interval=1)
    c = env.service.update_memory(env.notes, ids["/c.md"], content="seen elsewhere\n")
    run(
        "sh",
        "-c",
        "mv a.md b.md && mv d d2 && mv e1.md f1.md && mv e2.md f2.md && mv c.md c2.md",
        cwd=env.root / "notes",
    )
    out = env.once(interval=1)
    assert "3 moved" in out, out
    now = {m.path: m.id for m in env.service.list_memories(env.notes)}
    assert now["/b.md"] == ids["/a.md"]
    assert (now["/d2/x.md"], now["/d2/y.md"]) == (ids["/d/x.md"], ids["/d/y.md"])
    assert "/a.md" not in now
    assert "/d/x.md" not in now
    assert env.service.explicit_directories(env.notes) == []  # d/ went with the folder's d/
    history = [
        (v.operation, v.path) for v in env.service.list_versions(env.notes, memory_id=ids["/a.md"])
    ]
    assert sorted(history) == [("created", "/a.md"), ("modified", "/b.md")]
    moved = env.service.list_versions(env.notes, memory_id=ids["/a.md"]).data[0]
    assert moved.created_by is not None
    assert moved.created_by.id == env.session.id
    # Two empty files and two new empty ones: which went where cannot be told. New memories.
    assert now["/f1.md"] not in (ids["/e1.md"], ids["/e2.md"])
    assert now["/f2.md"] not in (ids["/e1.md"], ids["/e2.md"])
    # c.md changed in the store after the last pass: its memory stays; c2.md is new, and c.md
    # comes back with what the store has.
    assert now["/c.md"] == c.id
    assert now["/c2.md"] != c.id
    assert (env.root / "notes" / "c.md").read_text() == "seen elsewhere\n"
    assert (env.root / "notes" / "c2.md").read_text() == "see\n"
    time.sleep(1.1)
    env.once(interval=1)  # the empty files' old memories leave after their hold
    assert set(env.stored(env.notes)) == {
        "/b.md",
        "/c.md",
        "/c2.md",
        "/d2/x.md",
        "/d2/y.md",
        "/f1.md",
        "/f2.md",
    }
    assert "nothing to do" in env.once(interval=1)
    env.service.close()


def test_empty_directories_are_kept_in_step_both_ways(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A store's own directories (a mount's mkdir) and the folder's empty ones, as files are."""
    env = make(engine, db_url, tmp_path)
    notes, dirs = env.root / "notes", lambda: env.service.explicit_directories(env.notes)
    env.service.make_directory(env.notes, "/projects")
    env.service.make_directory(env.docs, "/ro")
    env.once(interval=1)
    assert (notes / "projects").is_dir()
    assert (env.root / "docs" / "ro").is_dir()
    (notes / "drafts").mkdir()
    (notes / "deep" / "er").mkdir(parents=True)
    out = env.once(interval=1)
    assert "2 directories made" in out, out  # deep/ holds one: the store needs no row for it
    assert dirs() == ["/deep/er/", "/drafts/", "/projects/"]
    (notes / "projects").rmdir()
    env.service.remove_directory(env.notes, "/drafts")
    (env.root / "docs" / "ro").rmdir()  # a read_only store's: put back
    env.once(interval=1)
    assert dirs() == ["/deep/er/"]
    assert not (notes / "drafts").exists()
    assert (env.root / "docs" / "ro").is_dir()
    assert env.service.explicit_directories(env.docs) == ["/ro/"]
    # A directory of the store's own with a file in it, removed with rm -r: the directory goes
    # once its file's delete has waited its interval.
    env.service.make_directory(env.notes, "/box")
    env.service.create_memory(env.notes, "/box/x.md", "x\n")
    env.once(interval=1)
    run("rm", "-r", str(notes / "box"))
    env.once(interval=1)
    assert "/box/" in dirs()  # x.md is on hold
    time.sleep(1.1)
    env.once(interval=1)
    assert "/box/" not in dirs()
    assert "/box/x.md" not in env.stored(env.notes)
    # A directory only its file implied: gone from the folder with the file the store deleted,
    # and not made a directory of the store's own by the next pass.
    made = env.service.create_memory(env.notes, "/implied/y.md", "y\n")
    env.once(interval=1)
    env.service.delete_memory(env.notes, made.id)
    env.once(interval=1)
    assert not (notes / "implied").exists()
    assert "nothing to do" in env.once(interval=1)
    assert dirs() == ["/deep/er/"]
    env.service.close()


def test_local_delete_waits_an_interval_and_a_wiped_folder_deletes_nothing(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    env = make(engine, db_url, tmp_path)
    env.service.create_memory(env.notes, "/b.md", "beta\n")
    env.once(interval=1)
    (env.root / "notes" / "b.md").unlink()
    env.once(interval=1)
    assert "/b.md" in env.stored(env.notes)  # on hold
    time.sleep(1.1)
    env.once(interval=1)
    assert "/b.md" not in env.stored(env.notes)  # missing for a whole interval: deleted
    assert ("deleted", "/b.md", env.session.id) in env.versions(env.notes)
    # The last file of a directory: the directory stays in the store while the folder has it
    # (as a mount's rm), and goes with the folder's (rm -r).
    env.service.create_memory(env.notes, "/kept/k.md", "k\n")
    env.service.create_memory(env.notes, "/gone/g.md", "g\n")
    env.once(interval=1)
    (env.root / "notes" / "kept" / "k.md").unlink()
    run("rm", "-r", str(env.root / "notes" / "gone"))
    env.once(interval=1)
    time.sleep(1.1)
    env.once(interval=1)
    assert set(env.stored(env.notes)) == {"/a.md"}
    assert env.service.explicit_directories(env.notes) == ["/kept/"]
    # Everything gone at once (a wiped or unmounted folder): refused, said, nothing deleted.
    env.service.create_memory(env.notes, "/c.md", "gamma\n")
    env.once(interval=1)
    for f in (env.root / "notes").glob("*.md"):
        f.unlink()
    time.sleep(1.1)
    out = env.once(interval=1, in_step=False) + env.once(interval=1, in_step=False)
    assert "lost every one of its 2 files" in out
    assert set(env.stored(env.notes)) == {"/a.md", "/c.md"}
    errors_file = (env.root / ".mnemofs-sync-errors").read_text()
    assert "not deleting them from the store" in errors_file
    env.service.close()


@pytest.mark.parametrize("by", ["once", "watching"])
@pytest.mark.parametrize("how", ["summed up", "moved into a folder"])
def test_a_folder_whose_every_file_went_for_new_ones_is_not_lost(
    engine: Engine, db_url: str, tmp_path: Path, how: str, by: str
) -> None:
    """An agent sums its notes up in a new file and deletes them, or moves them all into a
    folder: every file the last pass knew is gone at once, but the folder holds files of its
    own, so it is not a wiped or unmounted folder. The first was refused as one for good
    (found by the wider walk): nothing of it reached the store, every pass said "lost". Both
    by a ``--once`` run's full look and by a watching worker's look at inotify's changes."""
    env = make(engine, db_url, tmp_path)
    env.service.create_memory(env.notes, "/b.md", "beta\n")
    watching = _watching(engine, env) if by == "watching" else None
    if watching is None:
        env.once(interval=1)
    notes = env.root / "notes"
    if how == "summed up":
        run("sh", "-c", "cat a.md b.md > sum.md && rm a.md b.md", cwd=notes)
        want = {"/sum.md": "alpha\nbeta\n"}
    else:
        run("sh", "-c", "mkdir old && mv a.md b.md old/", cwd=notes)
        want = {"/old/a.md": "alpha\n", "/old/b.md": "beta\n"}
    for _ in range(2):  # the second after the deletes' hold
        if watching is not None:
            assert watching[1].reconcile().errors == []
        else:
            out = env.once(interval=1)
            assert "lost" not in out, out
        time.sleep(0.6 if watching else 1.1)
    assert env.stored(env.notes) == want
    if watching is not None:
        watching[0].close()
    env.service.close()


def test_a_watching_worker_says_a_lost_folder_until_it_is_mended(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """Every file gone at once, seen through inotify: refused and said at every pass, as a
    ``--once`` run says it, until the folder is mended. The watching worker said it once;
    the next passes looked only at inotify's news (none), cleared the errors file, and the
    folder and the store stayed apart for good, in silence."""
    env = make(engine, db_url, tmp_path)
    env.service.create_memory(env.notes, "/b.md", "beta\n")
    service, worker = _watching(engine, env)
    notes = env.root / "notes"
    (notes / "a.md").unlink()
    (notes / "b.md").unlink()
    for _ in range(3):
        assert any("lost every one of its 2 files" in e for e in worker.reconcile().errors)
        assert "lost every one" in (env.root / ".mnemofs-sync-errors").read_text()
        time.sleep(0.3)
    assert set(env.stored(env.notes)) == {"/a.md", "/b.md"}  # nothing deleted
    (notes / "a.md").write_text("alpha\n")  # mended: one file back, the other let go
    for _ in range(2):
        assert worker.reconcile().errors == []
        time.sleep(0.6)
    assert env.stored(env.notes) == {"/a.md": "alpha\n"}
    assert not (env.root / ".mnemofs-sync-errors").exists()
    service.close()
    env.service.close()


def test_a_file_name_that_is_not_utf8_is_reported_not_fatal(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A local name that is not UTF-8 is refused like any invalid name, shown with its bad
    bytes escaped; reporting it stopped the whole worker before (the errors file could not
    be written)."""
    env = make(engine, db_url, tmp_path)
    env.once()
    notes = os.fsencode(env.root / "notes")
    with open(os.path.join(notes, b"bad\xff.md"), "wb") as f:
        f.write(b"latin-1 name\n")
    (env.root / "notes" / "good.md").write_text("fine\n")
    out = env.once(in_step=False)
    assert "bad\\xff.md: not uploaded" in out
    report = (env.root / ".mnemofs-sync-errors").read_text()
    assert "/bad\\xff.md: not uploaded" in report
    assert "not valid Unicode" in report
    assert set(env.stored(env.notes)) == {"/a.md", "/good.md"}
    assert os.path.exists(os.path.join(notes, b"bad\xff.md"))
    env.service.close()


def test_a_path_left_for_later_is_looked_at_by_the_next_run(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A memory the folder cannot take yet (a local file stands where its directory goes) is
    left for the next pass; the next pass may be another `--once` run, which must still look
    at it once the way is clear (the feed has moved past it)."""
    env = make(engine, db_url, tmp_path)
    env.once()
    notes = env.root / "notes"
    (notes / "plans").write_text("a file where a directory goes\n")
    env.service.create_memory(env.notes, "/plans/q3.md", "quarter three\n")
    env.once(in_step=False)
    assert not (notes / "plans").is_dir()
    assert "/plans: not uploaded" in (env.root / ".mnemofs-sync-errors").read_text()
    (notes / "plans").unlink()
    env.once()
    assert (notes / "plans" / "q3.md").read_text() == "quarter three\n"
    assert env.stored(env.notes) == {"/a.md": "alpha\n", "/plans/q3.md": "quarter three\n"}
    env.service.close()


def test_read_only_store_is_restored(engine: Engine, db_url: str, tmp_path: Path) -> None:
    env = make(engine, db_url, tmp_path)
    env.once()
    docs = env.root / "docs"
    assert (docs / "readme.md").stat().st_mode & 0o222 == 0  # read-only files
    os.chmod(docs / "readme.md", 0o644)
    (docs / "readme.md").write_text("tampered\n")
    (docs / "new.md").write_text("sneaked in\n")
    out = env.once()
    assert "discarded" in out
    assert (docs / "readme.md").read_text() == "read me\n"
    assert not (docs / "new.md").exists()
    (docs / "readme.md").unlink()
    env.once()
    assert (docs / "readme.md").read_text() == "read me\n"
    assert env.versions(env.docs) == [("created", "/readme.md", "api")]  # nothing uploaded
    env.service.close()


def test_files_the_store_refuses_stay_local_and_are_reported(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    env = make(engine, db_url, tmp_path)
    env.once()
    notes = env.root / "notes"
    (notes / "big.md").write_bytes(b"x" * (100 * 1024 + 1))
    (notes / "binary.md").write_bytes(b"\xff\xfe not utf-8")
    out = env.once(in_step=False)
    assert "big.md: not uploaded" in out
    report = (env.root / ".mnemofs-sync-errors").read_text()
    assert "/big.md: not uploaded" in report
    assert "/binary.md: not uploaded" in report
    assert set(env.stored(env.notes)) == {"/a.md"}
    assert (notes / "big.md").exists()
    # Logged once per change, not at every reconcile; the run fails while it stands.
    assert "big.md" not in env.once(in_step=False)
    (notes / "big.md").unlink()
    (notes / "binary.md").unlink()
    env.once()
    assert not (env.root / ".mnemofs-sync-errors").exists()
    env.service.close()


def test_foreground_worker_brings_changes_and_reconciles_at_sigterm(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    env = make(engine, db_url, tmp_path)
    argv = env.argv("--foreground", "--interval", "1")
    worker = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().startswith("mnemofs: synced 2 store(s)")
        env.service.update_memory(
            env.notes, env.service.find_memory(env.notes, "/a.md").id, content="remote\n"
        )
        a = env.root / "notes" / "a.md"
        assert wait_for(lambda: a.read_text() == "remote\n", timeout=5.0)  # within an interval
        (env.root / "notes" / "last.md").write_text("written just before the end\n")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert env.stored(env.notes)["/last.md"] == "written just before the end\n"
    state = json.loads((tmp_path / ".memory.mnemofs-sync.json").read_text())
    assert state["session"] == env.session.id
    env.service.close()


def test_background_worker_starts_syncs_and_stops_by_its_pid(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    env = make(engine, db_url, tmp_path)
    logs = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    started = subprocess.run(env.argv("--interval", "1"), capture_output=True, text=True, env=logs)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("mnemofs: synced 2 store(s)")
    pid = int(started.stdout.split("(pid ", 1)[1].split(",", 1)[0])
    try:
        (env.root / "notes" / "bg.md").write_text("from the background\n")
        assert wait_for(lambda: "/bg.md" in env.stored(env.notes), timeout=10.0)
    finally:
        os.kill(pid, signal.SIGTERM)
        assert wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=30.0)
    env.service.close()


def test_a_watching_worker_looks_only_at_what_changed(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """In-process: after the start-up looks, a reconcile stats only what inotify reported, and
    still sees edits, new files, deletes (after the hold) and new directories."""
    from mnemofs.sync import SyncWorker

    env = make(engine, db_url, tmp_path)
    service = MemoryService(engine, actor=env.session.id)
    worker = SyncWorker(service, env.session, env.root, interval=0.01)
    worker.reconcile()
    worker.watch_local_changes()
    worker.reconcile()  # makes the watches
    worker.reconcile()  # the one full look after a new watch
    notes = env.root / "notes"
    looked: list[set[str]] = []
    real_stat = SyncWorker._stat

    def spy(folder: Folder, paths: set[str], links: set[str]) -> dict[str, os.stat_result]:
        looked.append(set(paths))
        return real_stat(folder, paths, links)

    worker._stat = spy  # type: ignore[method-assign]
    (notes / "a.md").write_text("edited\n")
    (notes / "n.md").write_text("new\n")
    looked.clear()
    worker.reconcile()
    assert set().union(*looked) == {"/a.md", "/n.md"}  # both stores: nothing else was looked at
    assert env.stored(env.notes) == {"/a.md": "edited\n", "/n.md": "new\n"}
    (notes / "n.md").unlink()
    worker.reconcile()  # on hold
    time.sleep(0.02)
    worker.reconcile()
    assert "/n.md" not in env.stored(env.notes)
    (notes / "sub").mkdir()  # a new directory: one full look, then watched too
    (notes / "sub" / "s.md").write_text("in a new directory\n")
    for _ in range(3):
        worker.reconcile()
    assert env.stored(env.notes)["/sub/s.md"] == "in a new directory\n"
    (notes / "sub" / "s.md").write_text("edited again\n")
    looked.clear()
    worker.reconcile()
    assert set().union(*looked) == {"/sub/s.md"}
    assert env.stored(env.notes)["/sub/s.md"] == "edited again\n"
    moving = env.service.find_memory(env.notes, "/sub/s.md").id
    (notes / "sub" / "s.md").rename(notes / "s2.md")  # a move, as inotify tells it
    looked.clear()
    worker.reconcile()
    assert set().union(*looked) == {"/sub/s.md", "/s2.md"}
    assert env.service.find_memory(env.notes, "/s2.md").id == moving
    env.service.make_directory(env.notes, "/from-elsewhere")  # no inotify event: the store's
    worker.reconcile()
    assert (notes / "from-elsewhere").is_dir()
    service.close()
    env.service.close()


def test_a_watching_worker_removes_a_directory_once_its_files_went(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """rm -r of one of the store's directories: the store refuses to remove it while its
    file's delete waits out the hold, and a pass that looks only at inotify's changes (which
    has none by then) still asks again."""
    env = make(engine, db_url, tmp_path)
    env.service.make_directory(env.notes, "/box")
    env.service.create_memory(env.notes, "/box/x.md", "x\n")
    service, worker = _watching(engine, env)
    run("rm", "-r", str(env.root / "notes" / "box"))
    worker.reconcile()  # a removed directory: a full look, and a new watch
    worker.reconcile()  # the full look after it; x.md still on hold
    assert "/box/" in env.service.explicit_directories(env.notes)
    time.sleep(0.6)
    scans: list[str] = []
    real_scan = Folder.scan

    def spy(folder: Folder, **kw: Any) -> tuple[dict[str, os.stat_result], list[str]]:
        scans.append(folder.path)
        return real_scan(folder, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Folder, "scan", spy)
        worker.reconcile()
    assert not any(p.endswith("notes") for p in scans)  # inotify's changes only
    assert "/box/x.md" not in env.stored(env.notes)
    assert env.service.explicit_directories(env.notes) == []
    service.close()
    env.service.close()


class RacingService(MemoryService):
    """The real service, with another writer deleting ``victim`` just before it is fetched."""

    victim: str | None = None

    def get_memory(self, store_id: str, memory_id: str, **kw: Any) -> Memory:
        if memory_id == self.victim:
            self.victim = None
            self.delete_memory(store_id, memory_id, actor="cli")
        return super().get_memory(store_id, memory_id, **kw)


def test_a_memory_gone_mid_pass_affects_only_its_own_path(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = RacingService(engine, actor="api")
    store = service.create_store("Notes").id
    for name in ("a", "b", "c"):
        service.create_memory(store, f"/{name}.md", f"{name}\n")
    session = service.create_session([{"memory_store_id": store}], mount_root=str(tmp_path))
    worker = SyncWorker(service, session, tmp_path / "memory")
    service.victim = service.find_memory(store, "/b.md").id  # listed, gone when fetched
    report = worker.reconcile()
    assert report.errors == []
    folder = tmp_path / "memory" / "notes"
    assert sorted(p.name for p in folder.iterdir()) == ["a.md", "c.md"]
    service.create_memory(store, "/b.md", "b again\n")  # the path's next pass
    report = worker.reconcile()
    assert report.errors == []
    assert {p.name: p.read_text() for p in folder.iterdir()} == {
        "a.md": "a\n",
        "b.md": "b again\n",
        "c.md": "c\n",
    }
    service.close()


def test_folder_and_store_converge_after_concurrent_writers(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """Writers create, update, rename, fold temporaries over files and delete while a worker
    syncs every second; once they stop, the final reconcile leaves folder and store equal."""
    service = MemoryService(engine, actor="api")
    store = service.create_store("Notes").id
    root = tmp_path / "memory"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    writer_session = service.create_session([{"memory_store_id": store}], mount_root="/m")
    argv = [
        sys.executable,
        "-m",
        "mnemofs",
        "--db",
        db_url,
        "sync",
        "--session",
        session.id,
        "--foreground",
        "--interval",
        "1",
    ]
    worker = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    failures: list[BaseException] = []

    def write(seed: int) -> None:
        rng = random.Random(seed)
        actor = writer_session.id
        paths = [f"/d{i % 3}/f{i}.md" for i in range(24)]
        drafts: list[tuple[float, str]] = []  # fresh files to fold once a pass may have seen them
        n = 0
        while not stop.is_set():
            n += 1
            path, other = rng.choice(paths), rng.choice(paths)
            try:
                found = service.list_memories(store)
                by_path = {m.path: m.id for m in found}
                roll = rng.random()
                if path not in by_path:
                    service.create_memory(store, path, f"{seed} {n}\n", actor=actor)
                elif roll < 0.4:
                    service.update_memory(
                        store, by_path[path], content=f"{seed} {n}\n", actor=actor
                    )
                elif roll < 0.55 and other not in by_path:
                    service.update_memory(store, by_path[path], path=other, actor=actor)
                elif roll < 0.75 and drafts and time.monotonic() - drafts[0][0] > 1.5:
                    # a fresh file the worker has brought down, folded over another
                    service.rename_over(
                        store, drafts.pop(0)[1], by_path[path], actor=actor, fold=True
                    )
                elif roll < 0.75:
                    draft = service.create_memory(
                        store, f"/draft{seed}-{n}", f"{seed} {n} t\n", actor=actor
                    )
                    drafts.append((time.monotonic(), draft.id))
                else:
                    service.delete_memory(store, by_path[path], actor=actor)
            except (NotFound, Conflict):
                continue  # the other writer got there first
            except BaseException as exc:
                failures.append(exc)
                return

    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().startswith("mnemofs: synced")
        writers = [threading.Thread(target=write, args=(seed,)) for seed in (1, 2)]
        for t in writers:
            t.start()
        time.sleep(4.0)
        stop.set()
        for t in writers:
            t.join()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        stop.set()
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert failures == []
    folder = root / "notes"
    local = {
        "/" + str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()
    }
    stored = {
        m.path: service.find_memory(store, m.path).content for m in service.list_memories(store)
    }
    assert len(stored) > 5
    assert local == stored
    service.close()


class DownService(MemoryService):
    """The real service, with the database unreachable for lookups by path."""

    down = False

    def find_memory(self, store_id: str, path: str, **kw: Any) -> Memory:
        if self.down:
            raise Unavailable("the database is unreachable (test)")
        return super().find_memory(store_id, path, **kw)


def test_a_retried_path_is_not_deleted_while_the_database_cannot_answer(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = DownService(engine, actor="api")
    store = service.create_store("Notes").id
    service.create_memory(store, "/a.md", "alpha\n")
    session = service.create_session([{"memory_store_id": store}], mount_root=str(tmp_path))
    worker = SyncWorker(service, session, tmp_path / "memory")
    worker.reconcile()
    local = tmp_path / "memory" / "notes" / "a.md"
    worker.states[store].retry.add("/a.md")  # left over from a pass that could not finish
    service.down = True
    report = worker.reconcile()
    assert any("unreachable" in e for e in report.errors)
    assert local.read_text() == "alpha\n"  # "cannot say" is not "gone"
    service.down = False
    assert worker.reconcile().errors == []
    assert local.read_text() == "alpha\n"
    assert service.find_memory(store, "/a.md").content == "alpha\n"
    service.close()


class DeletesDownService(MemoryService):
    """The real service, with the database unreachable for deletes."""

    down = False

    def delete_memory(self, *args: Any, **kw: Any) -> Any:
        if self.down:
            raise Unavailable("the database is unreachable (test)")
        return super().delete_memory(*args, **kw)


def test_a_pass_cut_short_leaves_nothing_behind(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """The database goes away in the middle of a watching worker's pass: what that pass had
    not got to (an edit inotify told of, a memory waiting for its way to clear) is taken up
    by the next pass once it is back, not forgotten until touched again."""
    service = DeletesDownService(engine, actor="api")
    store = service.create_store("Notes").id
    service.create_memory(store, "/a.md", "alpha\n")
    session = service.create_session([{"memory_store_id": store}], mount_root=str(tmp_path))
    worker = SyncWorker(service, session, tmp_path / "memory", interval=0.01)
    worker.reconcile()
    worker.watch_local_changes()
    worker.reconcile()  # makes the watch
    worker.reconcile()  # the one full look after a new watch
    notes = tmp_path / "memory" / "notes"
    (notes / "plans").write_text("a file where a directory goes\n")
    service.create_memory(store, "/plans/q3.md", "quarter three\n")
    (notes / "a.md").unlink()
    worker.reconcile()  # the delete is held for an interval
    assert "/plans/q3.md" in worker.states[store].retry  # waits for its way to clear
    time.sleep(0.02)
    (notes / "plans").unlink()
    (notes / "b.md").write_text("bee\n")
    service.down = True
    report = worker.reconcile()  # the delete of /a.md comes first, and fails
    assert any("unreachable" in e for e in report.errors), report.errors
    service.down = False
    assert worker.reconcile().errors == []
    assert {m.path for m in service.list_memories(store)} == {"/b.md", "/plans/q3.md"}
    assert service.find_memory(store, "/b.md").content == "bee\n"
    assert (notes / "plans" / "q3.md").read_text() == "quarter three\n"
    service.close()


def test_sync_with_attach_twice_finds_the_last_baseline(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """``sync --attach STORE --root DIR --once`` from cron makes a new session each run; the
    folder's baseline is found all the same: a local edit is one version, no conflict copy."""
    env = make(engine, db_url, tmp_path)
    argv = [sys.executable, "-m", "mnemofs", "--db", db_url, "sync", "--attach", "Notes"]
    argv += ["--root", str(env.root), "--once"]

    def cron() -> None:
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    cron()
    assert (env.root / "notes" / "a.md").read_text() == "alpha\n"
    (env.root / "notes" / "a.md").write_text("alpha, edited between runs\n")
    (env.root / "notes" / "new.md").write_text("made between runs\n")
    cron()
    cron()
    assert env.stored(env.notes) == {
        "/a.md": "alpha, edited between runs\n",
        "/new.md": "made between runs\n",
    }
    assert not [p for p in (env.root / "notes").iterdir() if ".conflict-" in p.name]
    ops = [(op, path) for op, path, _ in env.versions(env.notes)]
    assert ops == [("created", "/new.md"), ("modified", "/a.md"), ("created", "/a.md")]
    # A store moved to another folder name has no baseline there: it starts over, losing
    # nothing (the store's content comes down; nothing is deleted).
    env.service.update_store(env.notes, name="Renamed Notes")
    argv[argv.index("Notes")] = env.notes
    cron()
    assert (env.root / "renamed-notes" / "a.md").read_text() == "alpha, edited between runs\n"
    assert set(env.stored(env.notes)) == {"/a.md", "/new.md"}
    env.service.close()


@pytest.mark.parametrize("how", ["renamed over", "rewritten, its mtime set back"])
def test_a_change_its_size_and_mtime_do_not_show_is_sent(
    engine: Engine, db_url: str, tmp_path: Path, how: str
) -> None:
    """A file replaced by another of the same size and mtime (``mv b.md g.md`` after both
    were written in one tick of the clock; ``cp -p``, ``tar`` or ``touch -d`` setting the old
    mtime back on new bytes): its size and mtime are what the baseline has, and the pass took
    it as unchanged, so the folder and the store stayed apart for good. Its inode and ctime
    say it changed."""
    env = make(engine, db_url, tmp_path)
    env.service.create_memory(env.notes, "/b.md", "bbbb\n")
    env.service.create_memory(env.notes, "/g.md", "gggg\n")
    service = MemoryService(engine, actor=env.session.id)
    worker = SyncWorker(service, env.session, env.root, interval=0.01)
    worker.reconcile()
    notes = env.root / "notes"
    was = os.stat(notes / "g.md")
    if how == "renamed over":
        os.utime(notes / "b.md", ns=(was.st_atime_ns, was.st_mtime_ns))
        os.rename(notes / "b.md", notes / "g.md")
    else:
        (notes / "g.md").write_text("hhhh\n")
        os.utime(notes / "g.md", ns=(was.st_atime_ns, was.st_mtime_ns))
    now = os.stat(notes / "g.md")
    assert (now.st_size, now.st_mtime_ns) == (was.st_size, was.st_mtime_ns)
    for _ in range(3):  # a local delete is sent once it has stayed missing for an interval
        worker.reconcile()
        time.sleep(0.05)
    text = (notes / "g.md").read_text()
    assert text == ("bbbb\n" if how == "renamed over" else "hhhh\n")
    assert env.stored(env.notes)["/g.md"] == text
    assert sorted(env.stored(env.notes)) == (
        ["/a.md", "/g.md"] if how == "renamed over" else ["/a.md", "/b.md", "/g.md"]
    )
    service.close()


def _walking(
    engine: Engine, db_url: str, tmp_path: Path
) -> tuple[Env, str, MemoryService, SyncWorker]:
    """For the random walks: a store "Walk" synced to ``walk/`` by a worker in this process
    (an interval of 50 ms), after its first pass."""
    env = make(engine, db_url, tmp_path)
    store = env.service.create_store("Walk").id
    session = env.service.create_session([{"memory_store_id": store}], mount_root=str(env.root))
    service = MemoryService(engine, actor=session.id)
    worker = SyncWorker(service, session, env.root, interval=0.05)
    worker.reconcile()
    return env, store, service, worker


def _settle(worker: SyncWorker) -> None:
    """Passes enough for held deletes to go (twice the interval and more)."""
    for _ in range(3):
        worker.reconcile()
        time.sleep(0.1)
    worker.reconcile()


def test_a_folder_and_the_api_agree_after_a_random_walk(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """A synced folder and the API change a handful of files at random: saves, appends,
    renames of files and folders, deletes, and the API's saves, renames, deletes and folder
    moves, with passes in between. After passes enough for held deletes, the folder holds
    exactly the store's files (conflict copies included: both keep them). Each step's outcome
    is not checked. Seed 11 found a rename over a file of the same size and mtime taken as
    unchanged, the two sides apart for good."""
    env, store, service, worker = _walking(engine, db_url, tmp_path)
    folder, walk = env.root / "walk", Walk(random.Random(11))
    rng = walk.rng

    def agree() -> bool:
        _settle(worker)
        return walks.files(folder) == walks.stored(env.service, store)

    for i in range(300):
        name, other, text = rng.choice(walks.NAMES), rng.choice(walks.NAMES), f"{i}\n"
        roll = rng.random()
        if walk.on_files(folder, name, other, text, roll):
            pass
        elif roll < 0.7:
            walk.through_api(env.service, store, name, other, text)
        elif roll < 0.85:
            worker.reconcile()
            walk.steps.append("pass")
        else:
            time.sleep(0.05 * rng.choice([0, 1, 2]))
        if rng.random() < 0.1:
            assert agree(), walk.last()
    assert agree(), walk.last()
    service.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_folder_and_the_api_agree_after_a_wider_walk(
    engine: Engine, db_url: str, tmp_path: Path, seed: int
) -> None:
    """The walk above, wider: folders in folders, ``mkdir`` and ``rmdir`` on both sides,
    truncation, ``sed -i``, a temporary renamed over a file, the API's creates. After passes
    enough for held deletes, the folder holds exactly the store's files and directories."""
    env, store, service, worker = _walking(engine, db_url, tmp_path)
    folder = env.root / "walk"
    walk = Walk(random.Random(seed), walks.WIDE_NAMES, walks.WIDE_DIRS)
    rng = walk.rng

    def sides() -> tuple[object, object]:
        _settle(worker)
        return (
            (walks.files(folder), walks.directories(folder)),
            (walks.stored(env.service, store), walks.stored_directories(env.service, store)),
        )

    for i in range(300):
        name, other, text = rng.choice(walk.names), rng.choice(walk.names), f"{i}\n"
        roll = rng.random()
        if roll < 0.5:
            walk.on_files(folder, name, other, text, roll)
        elif roll < 0.62:
            walk.on_more(folder, name, text, (roll - 0.5) / 0.12)
        elif roll < 0.72:
            walk.through_api(env.service, store, name, other, text)
        elif roll < 0.77:
            walk.more_through_api(env.service, store, name, text)
        elif roll < 0.88:
            worker.reconcile()
            walk.steps.append("pass")
        else:
            time.sleep(0.05 * rng.choice([0, 1, 2]))
        if rng.random() < 0.1:
            local, stored = sides()
            assert local == stored, walk.last()
    local, stored = sides()
    assert local == stored, walk.last()
    service.close()
