"""``<mount root>/.mnemofs/``: what the agent cannot see from an errno alone (issue 19).

- ``refusals``: this mount's recent refused changes, newest first: when, where, the errno,
  the reason in plain words and what to do instead.
- ``changes``: what others (other sessions, the CLI, the API) changed in this session's stores
  since the mount started, newest first; and each **lost update**: a save here that replaced a
  version its descriptor never saw (another writer saved the file between this open and this
  close). Both versions are kept; the line says where to find them in ``.history/``.

Both are read-only and bounded (``NoticeLog.KEPT`` lines); ``.mnemofs`` is not listed in the
mount root (like ``.history``) but reachable by path. Their content is made at each open and
their size at each ``stat`` (the kernel keeps neither), so ``cat`` always reads the latest.
"""

from __future__ import annotations

import errno
import logging
import time

from mnemofs.fs.files import FilesMixin
from mnemofs.fs.history import version_name
from mnemofs.fs.nodes import BUFFERS_HINT, Handle, Node, _now_ns

log = logging.getLogger("mnemofs.fs")

NOTICES = ".mnemofs"

# What to do instead, by errno (the reason itself is the refusal's own message).
HINTS = {
    errno.EROFS: "this place is read-only: write in a read_write store (see the prompt note)",
    errno.EACCES: "remove what was refused (a credential: name where it is kept instead)",
    errno.EFBIG: "keep a memory under 100 KiB: split it into several files",
    errno.ENOSPC: "the store is full: delete memories that are no longer needed",
    errno.EILSEQ: "save UTF-8 text without NUL bytes, with names in Unicode NFC",
    errno.ENAMETOOLONG: "use a shorter name (255 bytes) or path (1,024 bytes)",
    errno.EXDEV: "copy the file into the other store, then delete it here",
    errno.EPERM: "links, devices and owner changes are not supported: use regular files",
    # A path's other rules (no control characters, 20 levels at most) are all EINVAL.
    errno.EINVAL: "use names without control characters (newlines, tabs), 20 levels deep at most",
    errno.EIO: "the database or server could not be reached: try again shortly",
    errno.ENOTEMPTY: "remove what is inside first",
    errno.ENFILE: BUFFERS_HINT,
}
# ...unless the refused call has one of its own.
CALL_HINTS = {
    ("mkdir", errno.ENOSPC): "remove empty directories with rmdir",
    ("write", errno.ENOSPC): BUFFERS_HINT,
}
# ENOSPC for a database's full disk, not a full store.
DISK_FULL_HINT = "nothing was saved: the database's disk needs room (tell whoever runs it)"
# Not refusals worth a line: lookups that probe, `mkdir -p` on what exists.
QUIET = frozenset({errno.ENOENT, errno.EEXIST, errno.EBADF})


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class NoticesMixin(FilesMixin):
    """``.mnemofs/refusals`` and ``.mnemofs/changes``: see the module docstring."""

    def find(self, parent: Node, name: str) -> Node | None:
        if parent is self.root and name == NOTICES:
            return self._notices_dir()
        return super().find(parent, name)

    def _notices_dir(self) -> Node:
        if self._notices is None:
            now = _now_ns()
            folder = Node(self._next_ino, NOTICES, self.root, True, None, now, now)
            self._next_ino += 1
            self.nodes[folder.ino] = folder
            for kind in self.notices.lines:
                node = self._new_node(kind, folder, False, now)
                node.report = kind
                node.size = self.notices.sizes[kind]
                self.notices.nodes[kind] = node
            self._notices = folder
        return self._notices

    def note_refusal(
        self, what: str, where: str, code: int, reason: str, hint: str | None = None
    ) -> None:
        """A change this mount refused (the adapter calls this with the errno it returns);
        ``hint`` for another than the errno's usual one."""
        if code in QUIET:
            return
        name = errno.errorcode.get(code, str(code))
        hint = hint or CALL_HINTS.get((what, code)) or HINTS.get(code)
        line = f"{stamp()}  {where}  {what}: {name}: {reason}" + (f" -> {hint}" if hint else "")
        self.notices.add("refusals", line)

    def _saved_by(self, handle: Handle) -> None:
        """After a save through ``handle``: if it replaced another writer's version that this
        descriptor never saw, say so in ``changes`` (and in the log)."""
        node = handle.node
        theirs = node.other_version
        seen, handle.seen = handle.seen, node.version_id
        if theirs is None or node.mount is None or seen == node.version_id:
            return
        if theirs[0] in (seen, node.version_id):
            return  # this descriptor saw theirs, or nothing replaced it (nothing was saved)
        node.other_version = None
        version_id, actor, at = theirs
        path = self.path(node)
        names: dict[str, str] = {}
        try:
            found = self.service.path_history(node.mount.store_id, path)
            names = {e.version_id: version_name(n, e) for n, e in enumerate(found.versions, 1)}
        except Exception:  # the notice must never fail the save that succeeded
            log.debug("no history for the lost-update notice of %s", path, exc_info=True)
        where = f"{node.mount.slug}/.history{path}/"
        ours = node.version_id or ""
        line = (
            f"{stamp()}  {node.mount.slug}{path}  LOST UPDATE?: your save replaced what {actor} "
            f"saved at {at}, which this descriptor never read; both are kept: "
            f"{where}{names.get(version_id, version_id)} (theirs), "
            f"{where}{names.get(ours, ours)} (yours)"
        )
        log.warning("%s", line)
        self.notices.add("changes", line)
