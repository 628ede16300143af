"""Random walks over a store's files (``test_shared.py``'s mounts, ``test_sync.py``'s folder):
the steps both take, drawn from one ``random.Random`` in a fixed order, so a seed replays."""

from __future__ import annotations

import errno
import os
import random
import subprocess
from pathlib import Path
from typing import Any

from mnemofs.errors import MnemofsError
from mnemofs.models import MemoryPrefix
from mnemofs.store import MemoryService

NAMES = ["a.md", "b.md", "d/c.md", "d/e.md", "f/g.md"]
DIRS = ["d", "f", "h"]
# The wider walks: a file two folders down, folders inside folders.
WIDE_NAMES = [*NAMES, "d/x/y.md"]
WIDE_DIRS = [*DIRS, "d/x", "h/i"]


def write(path: Path, text: str, mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


def shrink(path: Path, size: int) -> None:
    """``truncate`` to ``size`` or less: never past the end (a hole of NULs no memory holds)."""
    os.truncate(path, min(size, path.stat().st_size))


def replace(path: Path, text: str) -> None:
    """An editor's or a program's save: a hidden temporary beside the file, then ``os.replace``."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    try:
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


def sed(path: Path) -> None:
    """``sed -i`` (its own temporary, renamed over the file), its refusal raised as an errno."""
    done = subprocess.run(["sed", "-i", "s/[0-9]/N/", str(path)], capture_output=True, text=True)
    if done.returncode:
        known = {"No such file": errno.ENOENT, "Read-only": errno.EROFS, "Not a dir": errno.ENOTDIR}
        code = next((c for s, c in known.items() if s in done.stderr), errno.EIO)
        raise OSError(code, done.stderr.strip())


def files(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (not the hidden ones: ``.history``, ``.mnemofs``, a sync's
    state) and its text, or the errno its read gave."""
    found: dict[str, str] = {}
    for where, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if name.startswith("."):
                continue
            path = Path(where, name)
            try:
                found["/" + str(path.relative_to(folder))] = path.read_text()
            except OSError as exc:
                found["/" + str(path.relative_to(folder))] = f"<{errno.errorcode[exc.errno or 0]}>"
    return found


def directories(folder: Path) -> set[str]:
    """Every directory under ``folder`` but the hidden ones, as the store names prefixes."""
    found: set[str] = set()
    for where, dirs, _ in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.update("/" + str(Path(where, d).relative_to(folder)) + "/" for d in dirs)
    return found


def stored(service: MemoryService, store: str) -> dict[str, str]:
    return {m.path: m.content or "" for m in service.list_memories(store, view="full")}


def stored_directories(service: MemoryService, store: str, under: str = "/") -> set[str]:
    """The store's directories as its depth-1 listings show them: implied by memories, or
    made by ``mkdir``."""
    found: set[str] = set()
    for entry in service.list_memories(store, path_prefix=under, depth=1):
        if isinstance(entry, MemoryPrefix):
            found |= {entry.path} | stored_directories(service, store, entry.path)
    return found


class Walk:
    """The steps taken so far, each with its outcome (not checked: only what the sides show
    in the end is)."""

    def __init__(
        self, rng: random.Random, names: list[str] = NAMES, dirs: list[str] = DIRS
    ) -> None:
        self.rng = rng
        self.names, self.dirs = names, dirs
        self.steps: list[str] = []

    def step(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> int:
        """Take one step; its errno (0 when it worked), a store's error as ``-1``."""
        try:
            fn(*args, **kwargs)
            self.steps.append(f"{what}: ok")
            return 0
        except OSError as exc:
            self.steps.append(f"{what}: {errno.errorcode.get(exc.errno or 0)}")
            return exc.errno or -1
        except MnemofsError as exc:
            self.steps.append(f"{what}: {type(exc).__name__}")
            return -1

    def last(self, count: int = 40) -> str:
        return "\n".join(self.steps[-count:])

    def on_files(self, folder: Path, name: str, other: str, text: str, roll: float) -> bool:
        """For ``roll`` under 0.5, a change of ``folder``'s files (True): a save, an append, a
        rename of a file or a directory, a delete. ``folder``'s name labels the step."""
        where = f"{folder.parent.name}/{folder.name}"
        at, path = f"{where} {name}", folder / name
        if roll < 0.2:
            self.step(f"write {at}", write, path, text, "w")
        elif roll < 0.3:
            self.step(f"append {at}", write, path, text, "a")
        elif roll < 0.38:
            self.step(f"rename {at} {other}", os.rename, path, folder / other)
        elif roll < 0.44:
            old, new = self.rng.choice(self.dirs), self.rng.choice(self.dirs)
            self.step(f"rename {where} {old}/ {new}/", os.rename, folder / old, folder / new)
        elif roll < 0.5:
            self.step(f"unlink {at}", os.unlink, path)
        else:
            return False
        return True

    def on_more(self, folder: Path, name: str, text: str, roll: float) -> int:
        """The wider walks' other changes, by ``roll`` in [0, 1): a truncation, ``sed -i``, a
        temporary renamed over the file, ``mkdir``, ``rmdir``. Returns the step's errno."""
        where = f"{folder.parent.name}/{folder.name}"
        at, path, tree = f"{where} {name}", folder / name, self.rng.choice(self.dirs)
        if roll < 0.2:
            size = self.rng.choice([0, 1, 3])
            return self.step(f"truncate {at} to {size}", shrink, path, size)
        if roll < 0.4:
            return self.step(f"sed -i {at}", sed, path)
        if roll < 0.6:
            return self.step(f"replace {at} {text.strip()}", replace, path, text)
        if roll < 0.8:
            return self.step(f"mkdir {where} {tree}/", os.mkdir, folder / tree)
        return self.step(f"rmdir {where} {tree}/", os.rmdir, folder / tree)

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
        api = f"api {store[-4:]} {memory.path}"
        if kind < 0.4:
            self.step(f"{api} save", service.update_memory, store, memory.id, content=text)
        elif kind < 0.7:
            moved = "/" + other
            self.step(f"{api} to {moved}", service.update_memory, store, memory.id, path=moved)
        elif kind < 0.85:
            self.step(f"{api} delete", service.delete_memory, store, memory.id)
        else:
            old, new = self.rng.choice(self.dirs), self.rng.choice(self.dirs)
            self.step(
                f"api /{old}/ to /{new}/", service.move_directory, store, f"/{old}", f"/{new}"
            )

    def more_through_api(self, service: MemoryService, store: str, name: str, text: str) -> None:
        """The API's other changes: a create (a conflict where ``name`` is taken), ``mkdir``,
        ``rmdir``."""
        tree, kind = "/" + self.rng.choice(self.dirs), self.rng.random()
        if kind < 0.4:
            self.step(f"api create /{name}", service.create_memory, store, "/" + name, text)
        elif kind < 0.7:
            self.step(f"api mkdir {tree}/", service.make_directory, store, tree)
        else:
            self.step(f"api rmdir {tree}/", service.remove_directory, store, tree)
