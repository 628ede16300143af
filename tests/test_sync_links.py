"""The sync worker never follows a symbolic link, in either direction, at any depth, even one
swapped in while a reconcile runs (issue 12): nothing outside the folder is created, changed or
read, and a link is reported and left alone."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

from mnemofs.store import MemoryService
from mnemofs.sync import ERRORS_FILE, SyncWorker

SECRET = "root-only secret, never to be uploaded\n"


class Env:
    def __init__(self, service: MemoryService, tmp_path: Path) -> None:
        self.service = service
        self.store = service.create_store("Notes").id
        service.create_memory(self.store, "/a.md", "alpha\n")
        service.create_memory(self.store, "/d/x.md", "x\n")
        self.root = tmp_path / "memory"
        self.notes = self.root / "notes"
        session = service.create_session(
            [{"memory_store_id": self.store}], mount_root=str(self.root)
        )
        self.worker = SyncWorker(service, session, self.root, interval=0.0)
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        (self.outside / "keep.txt").write_text("untouched\n")
        self.secret = tmp_path / "secret.txt"
        self.secret.write_text(SECRET)
        self.secret.chmod(0o600)

    def outside_state(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in self.outside.iterdir()}

    def stored(self) -> dict[str, str]:
        return {
            m.path: self.service.find_memory(self.store, m.path).content or ""
            for m in self.service.list_memories(self.store)
        }

    def errors(self) -> str:
        path = self.root / ERRORS_FILE
        return path.read_text() if path.exists() else ""


def test_a_memory_never_lands_outside_through_a_link(
    service: MemoryService, tmp_path: Path
) -> None:
    env = Env(service, tmp_path)
    env.worker.reconcile()
    (env.notes / "evil").symlink_to(env.outside)
    (env.notes / "d" / "deeper").mkdir()
    (env.notes / "d" / "deeper" / "evil").symlink_to(env.outside)
    for path in ("/evil/passwd", "/d/deeper/evil/passwd", "/evil/sub/new.md"):
        service.create_memory(env.store, path, "planted\n", actor="cli")
    for _ in range(2):
        report = env.worker.reconcile()
    assert env.outside_state() == {"keep.txt": "untouched\n"}
    assert {e.split(":")[0] for e in report.errors} == {
        "/evil",
        "/evil/passwd",
        "/evil/sub/new.md",
        "/d/deeper/evil",
        "/d/deeper/evil/passwd",
    }
    assert "/evil/passwd: not synced" in env.errors()
    assert (env.notes / "evil").is_symlink()  # left alone
    # The link goes: the memory comes down on the next pass.
    (env.notes / "evil").unlink()
    env.worker.reconcile()
    assert (env.notes / "evil" / "passwd").read_text() == "planted\n"


def test_a_link_is_never_read_into_the_store(service: MemoryService, tmp_path: Path) -> None:
    env = Env(service, tmp_path)
    env.worker.reconcile()
    (env.notes / "leak.md").symlink_to(env.secret)
    (env.notes / "d" / "leak.md").symlink_to(env.secret)
    (env.notes / "a.md").unlink()
    (env.notes / "a.md").symlink_to(env.secret)  # a synced file replaced by a link
    os.mkfifo(env.notes / "fifo.md")  # would block a plain read forever
    for _ in range(2):
        report = env.worker.reconcile()
    assert env.stored() == {"/a.md": "alpha\n", "/d/x.md": "x\n"}  # nothing read, nothing lost
    assert SECRET not in str(env.stored())
    for path in ("/a.md", "/leak.md", "/d/leak.md", "/fifo.md"):
        assert any(e.startswith(f"{path}: not synced") for e in report.errors), path
    assert (env.notes / "a.md").is_symlink()
    # A change in the store to a path that is now a link is not written through it either.
    service.update_memory(
        env.store, service.find_memory(env.store, "/a.md").id, content="changed\n", actor="cli"
    )
    env.worker.reconcile()
    assert env.secret.read_text() == SECRET


def test_a_directory_replaced_by_a_link_between_reconciles(
    service: MemoryService, tmp_path: Path
) -> None:
    env = Env(service, tmp_path)
    env.worker.reconcile()
    shutil.rmtree(env.notes / "d")
    (env.notes / "d").symlink_to(env.outside)
    (env.outside / "x.md").write_text("outside x\n")  # what a follow would read as /d/x.md
    service.update_memory(
        env.store, service.find_memory(env.store, "/d/x.md").id, content="x changed\n", actor="cli"
    )
    service.create_memory(env.store, "/d/new.md", "new\n", actor="cli")
    for _ in range(3):
        report = env.worker.reconcile()
    assert env.outside_state() == {"keep.txt": "untouched\n", "x.md": "outside x\n"}
    stored = env.stored()
    assert stored["/d/x.md"] == "x changed\n"  # not deleted, not replaced by what is outside
    assert "/d/new.md" in stored
    assert any(e.startswith("/d: not synced") for e in report.errors)
    # The watching worker (inotify) is held to the same rule.
    env.worker.watch_local_changes()
    for _ in range(3):
        env.worker.reconcile()
    service.update_memory(
        env.store, service.find_memory(env.store, "/d/x.md").id, content="x again\n", actor="cli"
    )
    env.worker.reconcile()
    assert env.outside_state() == {"keep.txt": "untouched\n", "x.md": "outside x\n"}


def test_a_store_directory_replaced_by_a_link_stays_and_nothing_is_made_through_it(
    service: MemoryService, tmp_path: Path
) -> None:
    """Empty directories: one of the store's, swapped for a link in the folder, is not taken
    for removed; one new in the store under that link is not made outside."""
    env = Env(service, tmp_path)
    service.make_directory(env.store, "/kept")
    env.worker.reconcile()
    assert (env.notes / "kept").is_dir()
    (env.notes / "kept").rmdir()
    (env.notes / "kept").symlink_to(env.outside)
    for _ in range(2):
        report = env.worker.reconcile()
    assert service.explicit_directories(env.store) == ["/kept/"]
    assert any(e.startswith("/kept/: not synced") for e in report.errors), report
    service.make_directory(env.store, "/kept/inner")
    for watching in (False, True):
        if watching:
            env.worker.watch_local_changes()
        for _ in range(3):
            report = env.worker.reconcile()
        assert service.explicit_directories(env.store) == ["/kept/", "/kept/inner/"]
        assert env.outside_state() == {"keep.txt": "untouched\n"}  # no inner/ made outside
        assert any(e.startswith("/kept/inner/: not synced") for e in report.errors), report


def test_links_swapped_in_while_reconciles_run(service: MemoryService, tmp_path: Path) -> None:
    """A directory and a file flip between real and link, as fast as they can, while the
    worker reconciles and the store changes: nothing outside changes, no secret gets in."""
    env = Env(service, tmp_path)
    env.worker.reconcile()
    stop = threading.Event()
    flips = 0

    def flip() -> None:
        nonlocal flips
        d, leak, spare = env.notes / "d", env.notes / "leak.md", env.notes / ".spare"
        while not stop.is_set():
            try:
                if d.is_symlink():
                    d.unlink()
                    d.mkdir()
                    (d / "x.md").write_text("x\n")
                else:
                    shutil.rmtree(d, ignore_errors=True)
                    spare.unlink(missing_ok=True)
                    spare.symlink_to(env.outside)
                    os.replace(spare, d)
                if leak.is_symlink():
                    leak.unlink()
                    leak.write_text("plain\n")
                else:
                    spare.unlink(missing_ok=True)
                    spare.symlink_to(env.secret)
                    os.replace(spare, leak)
                flips += 1
            except OSError:
                continue

    thread = threading.Thread(target=flip)
    thread.start()
    try:
        for i in range(150):
            service.save_file(env.store, "/d/x.md", f"x {i}\n")
            service.save_file(env.store, f"/d/n{i % 5}.md", f"n {i}\n")
            env.worker.reconcile()
    finally:
        stop.set()
        thread.join()
    assert flips > 50
    assert env.outside_state() == {"keep.txt": "untouched\n"}
    assert SECRET not in str(env.stored())
    for path in env.outside.iterdir():
        assert stat.S_ISREG(path.lstat().st_mode)


def test_a_store_folder_that_is_a_link_is_refused(service: MemoryService, tmp_path: Path) -> None:
    env = Env(service, tmp_path)
    env.root.mkdir()
    (env.root / "notes").symlink_to(env.outside)  # before the first reconcile
    report = env.worker.reconcile()
    assert any("notes" in e for e in report.errors)
    assert env.outside_state() == {"keep.txt": "untouched\n"}
