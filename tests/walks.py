"""Random walks over a store's files (``test_shared.py``'s mounts, ``test_sync.py``'s folder):
the steps both take, drawn from one ``random.Random`` in a fixed order, so a seed replays."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from typing import Any

from mnemofs.errors import MnemofsError
from mnemofs.store import MemoryService

NAMES = ["a.md", "b.md", "d/c.md", "d/e.md", "f/g.md"]
DIRS = ["d", "f", "h"]


def write(path: Path, text: str, mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


class Walk:
    """The steps taken so far, each with its outcome (not checked: only what the sides show
    in the end is)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.steps: list[str] = []

    def step(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
            self.steps.append(f"{what}: ok")
        except OSError as exc:
            self.steps.append(f"{what}: {errno.errorcode.get(exc.errno or 0)}")
        except MnemofsError as exc:
            self.steps.append(f"{what}: {type(exc).__name__}")

    def last(self, count: int = 40) -> str:
        return "\n".join(self.steps[-count:])

    def on_files(self, folder: Path, name: str, other: str, text: str, roll: float) -> bool:
        """For ``roll`` under 0.5, a change of ``folder``'s files (True): a save, an append, a
        rename of a file or a directory, a delete. ``folder``'s name labels the step."""
        at, path = f"{folder.parent.name} {name}", folder / name
        if roll < 0.2:
            self.step(f"write {at}", write, path, text, "w")
        elif roll < 0.3:
            self.step(f"append {at}", write, path, text, "a")
        elif roll < 0.38:
            self.step(f"rename {at} {other}", os.rename, path, folder / other)
        elif roll < 0.44:
            old, new = self.rng.choice(DIRS), self.rng.choice(DIRS)
            self.step(
                f"rename {folder.parent.name} {old}/ {new}/", os.rename, folder / old, folder / new
            )
        elif roll < 0.5:
            self.step(f"unlink {at}", os.unlink, path)
        else:
            return False
        return True

    def through_api(
        self,
        service: MemoryService,
        store: str,
        name: str,
        other: str,
        text: str,
        *,
        create: bool = True,
    ) -> None:
        """A change through the API: a save, a rename, a delete or a directory's move of one
        of the store's memories (with ``create``, a create of ``name`` when there are none)."""
        memories = list(service.list_memories(store))
        if not memories:
            if create:
                self.step(f"api create /{name}", service.create_memory, store, "/" + name, text)
            return
        memory, kind = self.rng.choice(memories), self.rng.random()
        api = f"api {memory.path}"
        if kind < 0.4:
            self.step(f"{api} save", service.update_memory, store, memory.id, content=text)
        elif kind < 0.7:
            moved = "/" + other
            self.step(f"{api} to {moved}", service.update_memory, store, memory.id, path=moved)
        elif kind < 0.85:
            self.step(f"{api} delete", service.delete_memory, store, memory.id)
        else:
            old, new = self.rng.choice(DIRS), self.rng.choice(DIRS)
            self.step(
                f"api /{old}/ to /{new}/", service.move_directory, store, f"/{old}", f"/{new}"
            )
