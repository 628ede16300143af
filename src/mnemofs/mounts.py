"""Mount records, kept without FUSE: the options of a mount, the pid record a daemon keeps while
it serves, and what ``/proc`` says is mounted where. ``mnemofs umount`` needs only this, so it
never imports pyfuse3 or trio (``fs/mount.py`` runs the daemon).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path

from mnemofs.models import Session
from mnemofs.private import private_dir, write_private


@dataclass(frozen=True)
class MountOptions:
    root: str
    allow_other: bool = False
    uid: int | None = None
    gid: int | None = None
    debug: bool = False
    group_access: bool = False  # members of gid share the owner's access (modes 0660/0770)


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mnemofs" / "mounts"


def record_path(root: str) -> Path:
    """Where the daemon serving ``root`` writes its pid (so ``mnemofs umount`` can find it)."""
    key = sha1(os.path.realpath(root).encode(), usedforsecurity=False).hexdigest()[:16]
    return state_dir() / f"{key}.json"


def read_record(root: str) -> dict[str, object] | None:
    try:
        data = json.loads(record_path(root).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mount_type(root: str) -> str | None:
    """The filesystem type of the topmost mount at ``root`` (``fuse.mnemofs`` for ours), or
    None if nothing is mounted there."""
    target = os.path.realpath(root)
    found = None
    try:
        with open("/proc/self/mountinfo") as mounts:
            for line in mounts:  # later lines are mounted on top of earlier ones
                fields = line.split()
                if len(fields) > 4 and fields[4].replace("\\040", " ") == target:
                    dash = fields.index("-")
                    found = fields[dash + 1]
    except (OSError, ValueError):
        pass
    return found


def lazy_unmount(root: str) -> None:
    subprocess.run(["fusermount3", "-u", "-z", root], check=False, capture_output=True)


@contextlib.contextmanager
def write_record(path: Path, root: str, session: Session) -> Iterator[None]:
    """The daemon's pid record, there while it serves (``mnemofs umount`` reads it)."""
    private_dir(path.parent)
    write_private(
        path, json.dumps({"pid": os.getpid(), "root": root, "session": session.id}).encode()
    )
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
