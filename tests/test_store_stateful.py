"""Random sequences of store operations against a plain in-memory model (Hypothesis).

After every step the store's listings, contents and whole version history must equal the
model's. Paths come from a tiny alphabet so that collisions (existing paths, a file where a
directory is, a directory where a file is) happen often.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from mnemofs import errors
from mnemofs.models import Memory
from mnemofs.store import MemoryService

paths = st.lists(st.sampled_from(["a", "b", "c.md"]), min_size=1, max_size=3).map(
    lambda parts: "/" + "/".join(parts)
)
contents = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)


@dataclass
class Model:
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (id, content)
    history: list[tuple[str, str, str]] = field(default_factory=list)  # (memory id, op, path)

    def blocked(self, path: str, ignore: str | None = None) -> bool:
        """Would ``path`` collide with a file or directory other than memory ``ignore``?"""
        for other, (mid, _) in self.files.items():
            if mid == ignore:
                continue
            if other == path or path.startswith(other + "/") or other.startswith(path + "/"):
                return True
        return False

    def children(self) -> list[str]:
        top = set()
        for path in self.files:
            head, sep, _ = path[1:].partition("/")
            top.add("/" + head + ("/" if sep else ""))
        return sorted(top)


def machine_for(make_service: Callable[[], MemoryService]) -> type[RuleBasedStateMachine]:
    class StoreMachine(RuleBasedStateMachine):
        memories = Bundle("memories")

        def __init__(self) -> None:
            super().__init__()
            self.service = make_service()
            self.store = self.service.create_store("stateful").id
            self.model = Model()

        def _id_path(self, mid: str) -> str:
            return next(p for p, (i, _) in self.model.files.items() if i == mid)

        @rule(target=memories, path=paths, content=contents)
        def create(self, path: str, content: str) -> str:
            if self.model.blocked(path):
                with pytest.raises(errors.Conflict):
                    self.service.create_memory(self.store, path, content)
                return "mem_never"
            mem = self.service.create_memory(self.store, path, content)
            self.model.files[path] = (mem.id, content)
            self.model.history.append((mem.id, "created", path))
            return mem.id

        @rule(mid=memories, content=contents)
        def update_content(self, mid: str, content: str) -> None:
            if mid not in {i for i, _ in self.model.files.values()}:
                with pytest.raises(errors.NotFound):
                    self.service.update_memory(self.store, mid, content=content)
                return
            path = self._id_path(mid)
            self.service.update_memory(self.store, mid, content=content)
            if self.model.files[path][1] != content:
                self.model.files[path] = (mid, content)
                self.model.history.append((mid, "modified", path))

        @rule(mid=memories, new_path=paths)
        def rename(self, mid: str, new_path: str) -> None:
            if mid not in {i for i, _ in self.model.files.values()}:
                return
            path = self._id_path(mid)
            if new_path != path and self.model.blocked(new_path, ignore=mid):
                with pytest.raises(errors.Conflict):
                    self.service.update_memory(self.store, mid, path=new_path)
                return
            self.service.update_memory(self.store, mid, path=new_path)
            if new_path != path:
                self.model.files[new_path] = self.model.files.pop(path)
                self.model.history.append((mid, "modified", new_path))

        @rule(mid=consumes(memories))
        def delete(self, mid: str) -> None:
            if mid not in {i for i, _ in self.model.files.values()}:
                with pytest.raises(errors.NotFound):
                    self.service.delete_memory(self.store, mid)
                return
            path = self._id_path(mid)
            self.service.delete_memory(self.store, mid)
            del self.model.files[path]
            self.model.history.append((mid, "deleted", path))

        @invariant()
        def listings_match(self) -> None:
            listed = self.service.list_memories(self.store, limit=3)
            assert [m.path for m in listed] == sorted(self.model.files)
            top = self.service.list_memories(self.store, depth=1, limit=2)
            assert [e.path for e in top] == self.model.children()
            assert self.service.get_store(self.store).memory_count == len(self.model.files)

        @invariant()
        def contents_match(self) -> None:
            for path, (mid, content) in self.model.files.items():
                mem = self.service.get_memory(self.store, mid)
                assert (mem.path, mem.content) == (path, content)

        @invariant()
        def history_matches(self) -> None:
            versions = list(self.service.list_versions(self.store, limit=7))
            assert [(v.memory_id, v.operation, v.path) for v in versions] == list(
                reversed(self.model.history)
            )
            heads = {
                m.memory_version_id
                for m in self.service.list_memories(self.store)
                if isinstance(m, Memory)
            }
            assert heads <= {v.id for v in versions}

        @invariant()
        def database_checks_clean(self) -> None:  # after every step, as s3ql runs fsck
            assert self.service.check(self.store).problems == []

    return StoreMachine


def test_store_matches_model(service: MemoryService) -> None:
    """Each example gets a fresh store in the one database of this test."""
    run_state_machine_as_test(
        machine_for(lambda: service),
        settings=settings(
            max_examples=60,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
