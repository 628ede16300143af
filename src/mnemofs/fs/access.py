"""Who may use a mount, and the modes it shows: owner-only by default (issue 12).

The daemon checks every request itself (no ``default_permissions``: the kernel would answer
EACCES for a read-only store before the daemon could say EROFS), so these rules are the whole
of it: the owner (``--uid``) and root may read and write; with ``group`` access, members of
``--gid`` may too; anyone else gets EACCES, for reads as much as for writes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int
    group: bool = False  # members of ``gid`` share the owner's access

    def allows(self, uid: int, gid: int, pid: int) -> bool:
        if uid in (0, self.uid):
            return True
        return self.group and (gid == self.gid or self.gid in groups_of(pid))

    def dir_mode(self, writable: bool) -> int:
        mode = 0o700 if writable else 0o500
        return mode | (mode >> 3 if self.group else 0)

    def file_mode(self, writable: bool) -> int:
        mode = 0o600 if writable else 0o400
        return mode | (mode >> 3 if self.group else 0)


def groups_of(pid: int) -> set[int]:
    """The supplementary groups of process ``pid`` (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("Groups:"):
                    return {int(g) for g in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()
