"""The same random file operations on a plain directory and on a mounted store must agree.

Each step runs on both trees and compares the outcome (result or errno); after every step the
two trees (names, kinds, contents) must be equal. An extra rule changes the store through the
Python API and makes the same change in the plain directory, then waits (at most the spec's
1 second) for the mount to show it.

Intended differences, kept out of the strategies: content is UTF-8 text without NUL and under
100 KiB (anything else is refused by the mount by design; a truncate that cuts a character is
EILSEQ), and there are no links, modes or owners to compare.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from mnemofs.models import Memory
from mnemofs.store import MemoryService, make_engine

from .mounted import mounted, wait_for

pytestmark = pytest.mark.mounted

names = st.sampled_from(["a", "b", "c.md"])
rel_paths = st.lists(names, min_size=1, max_size=3).map("/".join)
texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), max_codepoint=0x2FF),
    max_size=20,
)


def outcome(fn: object, *args: object) -> object:
    try:
        return ("ok", fn(*args))  # type: ignore[operator]
    except OSError as exc:
        return ("errno", exc.errno)


def snapshot(root: Path) -> dict[str, str | int]:
    """Every directory with its link count (2 + subdirectories) and every file's text."""
    tree: dict[str, str | int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            where = os.path.normpath(os.path.join(rel, d))
            tree[where + "/"] = os.stat(Path(dirpath, d)).st_nlink
        for f in filenames:
            tree[os.path.normpath(os.path.join(rel, f))] = Path(dirpath, f).read_text()
    return tree


def write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def shows(path: Path, text: str) -> bool:
    """Does ``path`` hold ``text`` yet? While a change made elsewhere is reaching the mount, a
    read may still get the old size with the new bytes (the kernel drops its cached size a few
    milliseconds after the daemon took the new content): not yet, rather than a failure."""
    try:
        return path.is_file() and read(path) == text
    except UnicodeDecodeError:
        return False


def _settings(max_examples: int) -> settings:
    """A state machine's runs: ``max_examples`` of 15 steps, each as slow as a mount is."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def _store_mounted(
    base: Path, name: str, **store: Any
) -> Iterator[tuple[MemoryService, str, Path]]:
    """A new SQLite database at ``base`` with one store, mounted (by ``mounted.VIA``)."""
    url = f"sqlite:///{base / 'db.sqlite'}"
    engine = make_engine(url)
    service = MemoryService(engine, actor="api")
    store_id = service.create_store(name, **store).id
    session = service.create_session([{"memory_store_id": store_id}], mount_root=str(base / "mnt"))
    with mounted(url, session.id, base / "mnt"):
        yield service, store_id, base / "mnt" / name.lower()
    service.close()
    engine.dispose()


@pytest.fixture(scope="module")
def mount_env(
    tmp_path_factory: pytest.TempPathFactory, mount_via: str
) -> Iterator[tuple[MemoryService, str, Path]]:
    yield from _store_mounted(tmp_path_factory.mktemp("diff"), "Diff")


def test_mount_behaves_like_a_directory(
    mount_env: tuple[MemoryService, str, Path], tmp_path: Path
) -> None:
    service, store, mnt = mount_env
    counter = itertools.count()

    class Differential(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            n = next(counter)
            self.plain = tmp_path / f"ex{n}"
            self.mount = mnt / f"ex{n}"
            self.prefix = f"/ex{n}/"
            self.plain.mkdir()
            self.mount.mkdir()

        def both(self, fn: object, rel: str, *args: object) -> None:
            before = self.parent_times(rel)
            a = outcome(fn, self.plain / rel, *args)
            b = outcome(fn, self.mount / rel, *args)
            assert a == b, (fn, rel, args, a, b)
            self.same_moves(before, self.parent_times(rel), (fn, rel))

        def both2(self, fn: object, rel: str, rel2: str) -> None:
            before = self.parent_times(rel) + self.parent_times(rel2)
            a = outcome(fn, self.plain / rel, self.plain / rel2)
            b = outcome(fn, self.mount / rel, self.mount / rel2)
            assert a == b, (fn, rel, rel2, a, b)
            self.same_moves(before, self.parent_times(rel) + self.parent_times(rel2), (fn, rel))

        def parent_times(self, rel: str) -> list[tuple[int, int] | None]:
            """mtime and ctime of the directory holding ``rel``, on each side (None: absent).
            A pause first: the plain side's clock ticks only every few milliseconds."""
            time.sleep(0.005)
            out: list[tuple[int, int] | None] = []
            for side in (self.plain, self.mount):
                try:
                    st = os.stat((side / rel).parent)
                    out.append((st.st_mtime_ns, st.st_ctime_ns))
                except OSError:
                    out.append(None)
            return out

        @staticmethod
        def same_moves(before: list[Any], after: list[Any], what: object) -> None:
            """A directory's times moved on the plain side exactly when they did in the mount."""
            for i in range(0, len(before), 2):
                if None in (before[i], before[i + 1], after[i], after[i + 1]):
                    continue
                plain_moved = before[i] != after[i]
                mount_moved = before[i + 1] != after[i + 1]
                assert plain_moved == mount_moved, (what, before, after)

        @rule(rel=rel_paths, text=texts)
        def write_file(self, rel: str, text: str) -> None:
            self.both(write, rel, text)

        @rule(rel=rel_paths, text=texts)
        def append_file(self, rel: str, text: str) -> None:
            self.both(append, rel, text)

        @rule(rel=rel_paths)
        def read_file(self, rel: str) -> None:
            self.both(read, rel)

        @rule(rel=rel_paths, size=st.integers(0, 30))
        def truncate(self, rel: str, size: int) -> None:
            if not (self.plain / rel).is_file():
                return
            data = (self.plain / rel).read_bytes()
            try:  # only cuts that leave text: a cut inside a character is EILSEQ by design
                data[:size].decode("utf-8")
            except UnicodeDecodeError:
                return
            if size <= len(data):  # growing would add NULs: not text either
                self.both(os.truncate, rel, size)

        @rule(rel=rel_paths)
        def mkdir(self, rel: str) -> None:
            self.both(os.mkdir, rel)

        @rule(rel=rel_paths)
        def rmdir(self, rel: str) -> None:
            self.both(os.rmdir, rel)

        @rule(rel=rel_paths)
        def unlink(self, rel: str) -> None:
            self.both(os.unlink, rel)

        @rule(src=rel_paths, dst=rel_paths)
        def rename(self, src: str, dst: str) -> None:
            self.both2(os.rename, src, dst)

        @rule(rel=rel_paths, text=texts)
        def api_write(self, rel: str, text: str) -> None:
            """Someone else (the API) writes a file; the mount must show it within a second."""
            target = self.plain / rel
            parents_ok = all(
                not p.exists() or p.is_dir() for p in [*target.parents][: rel.count("/")]
            )
            if target.is_dir() or not parents_ok:
                return
            path = self.prefix + rel
            try:
                memory = service.find_memory(store, path)
                service.update_memory(store, memory.id, content=text, actor="cli")
            except Exception:
                service.create_memory(store, path, text, actor="cli")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            assert wait_for(lambda: shows(self.mount / rel, text), timeout=1.5)

        @invariant()
        def same_tree(self) -> None:
            assert snapshot(self.plain) == snapshot(self.mount)

        def teardown(self) -> None:
            shutil.rmtree(self.plain, ignore_errors=True)

    run_state_machine_as_test(
        Differential,
        settings=_settings(max_examples=15),
    )


@pytest.fixture(scope="module")
def evicting_env(
    tmp_path_factory: pytest.TempPathFactory, mount_via: str
) -> Iterator[tuple[MemoryService, str, Path]]:
    """A mount of a store that holds 2 memories and evicts the least recently accessed."""
    base = tmp_path_factory.mktemp("evict")
    yield from _store_mounted(base, "Evicting", on_full="evict-lru", max_memories=2)


def test_an_evicting_store_s_mount_shows_what_the_store_holds(
    evicting_env: tuple[MemoryService, str, Path],
) -> None:
    """Random saves, appends, reads, renames and deletes in a full ``evict-lru`` store, where
    every create evicts the least recently accessed memory in its own transaction: after each
    step, within the spec's second, the mount's files are the store's memories, path for path
    and text for text. (A local mount once took its own evictions as seen and kept showing the
    evicted files.) The mount is compared with the store, not with a plain directory, which
    evicts nothing."""
    service, store, mnt = evicting_env

    def in_store() -> dict[str, str]:
        return {
            m.path.lstrip("/"): service.get_memory(store, m.id, count_access=False).content or ""
            for m in service.list_memories(store)
            if isinstance(m, Memory)
        }

    def in_mount() -> dict[str, str] | None:
        try:
            return {
                str(p.relative_to(mnt)): p.read_text(encoding="utf-8")
                for p in mnt.rglob("*")
                if p.is_file()
            }
        except (OSError, UnicodeDecodeError):  # a file went while being read: not settled
            return None

    class Evicting(RuleBasedStateMachine):
        @rule(rel=rel_paths, text=texts)
        def write_file(self, rel: str, text: str) -> None:
            outcome(write, mnt / rel, text)

        @rule(rel=rel_paths, text=texts)
        def append_file(self, rel: str, text: str) -> None:
            outcome(append, mnt / rel, text)

        @rule(rel=rel_paths)
        def read_file(self, rel: str) -> None:
            outcome(read, mnt / rel)  # an access: the least recently accessed changes

        @rule(rel=rel_paths)
        def mkdir(self, rel: str) -> None:
            outcome(os.mkdir, mnt / rel)

        @rule(src=rel_paths, dst=rel_paths)
        def rename(self, src: str, dst: str) -> None:
            outcome(os.rename, mnt / src, mnt / dst)

        @rule(rel=rel_paths)
        def unlink(self, rel: str) -> None:
            outcome(os.unlink, mnt / rel)

        @invariant()
        def mount_shows_the_store(self) -> None:
            assert wait_for(lambda: in_mount() == in_store(), timeout=1.5), (
                in_mount(),
                in_store(),
            )

        def teardown(self) -> None:
            for child in mnt.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()

    run_state_machine_as_test(
        Evicting,
        settings=_settings(max_examples=10),
    )
