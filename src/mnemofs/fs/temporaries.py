"""Temporary files: kept in memory, never saved while their name is a temporary one, made
memories once left alone for ``TEMP_GRACE_S`` (``promote_temporaries``, from the mount's
watcher), and bounded (see ``core.py`` for the whole story)."""

from __future__ import annotations

import errno
import logging
import time

from mnemofs.errors import MnemofsError, Unavailable
from mnemofs.fs.files import FilesMixin
from mnemofs.fs.nodes import TEMP_GRACE_S, TEMP_KEPT_BYTES, TEMP_KEPT_HINT, FsError, Node, errno_for

log = logging.getLogger("mnemofs.fs")


class TemporariesMixin(FilesMixin):
    """Temporary files left alone: see the module docstring."""

    def promote_temporaries(self, now: float | None = None) -> int:
        """Save temp-named files left alone for ``TEMP_GRACE_S`` as ordinary memories; how
        many were saved. One that cannot be saved yet (the store full, or refused as it is)
        stays in memory, the oldest first, up to ``TEMP_KEPT_BYTES`` in all: past that, it
        goes (``_drop_kept``), so no agent can fill the daemon's memory with them."""
        now = time.monotonic() if now is None else now
        saved = kept = 0
        if self.service.unavailable is not None:
            return saved  # a failed save would drop them; they wait for the database
        for node in sorted(self.temporaries, key=lambda n: n.ino):  # in the order made
            if not node.temporary or node.unlinked or self.nodes.get(node.ino) is not node:
                self.temporaries.discard(node)  # saved, renamed, removed or forgotten since
                continue
            if node.file is None or node.file.opens:
                continue
            if now - node.temp_since < TEMP_GRACE_S:
                continue
            refusal: MnemofsError | FsError | None = None  # a save refused just now
            if node.mount is not None and self._store_full(node.mount):
                why = "the store is full"  # still not counted; tried again later
            elif node.refused is not None and node.refused == hash(bytes(node.file.data)):
                why = "the store refused it"  # as it is: tried again once it changes
            else:
                # A write to it was refused (EFBIG), and said to the writer: it goes, as a
                # new file does whose save fails. Else a refusal keeps it (``_keep_refused``).
                poisoned = node.file.failed != 0
                node.temporary = False
                try:
                    self.save(node, undo=poisoned)
                except (MnemofsError, FsError) as exc:
                    if isinstance(exc, Unavailable):
                        self.in_step = False  # it may have committed all the same
                    if poisoned:
                        self.temporaries.discard(node)
                        continue
                    node.temporary = True
                    if isinstance(exc, Unavailable):
                        continue  # tried again at the next pass
                    why, refusal = f"the store refused it ({exc.message})", exc
                else:
                    self.temporaries.discard(node)
                    saved += 1
                    self._drop_clean_buffer(node)
                    continue
            kept += len(node.file.data)
            if kept > TEMP_KEPT_BYTES:
                self._drop_kept(node, why)
            elif refusal is not None:
                self._keep_refused(node, refusal)
        return saved

    def _keep_refused(self, node: Node, exc: MnemofsError | FsError) -> None:
        """A temporary file the store will not take as a memory (bytes no text holds, a
        credential, over a cap) stays what it was, a temporary file in memory: a rename, an
        unlink or the unmount ends it. Said once; tried again once its bytes change."""
        assert node.file is not None
        node.refused = hash(bytes(node.file.data))
        where = self.where(node)
        code = errno_for(exc)
        reason = f"{exc.message.rstrip('.')}; kept in memory until renamed, removed or unmounted"
        log.warning("%s: not saved as a memory (%s): %s", where, errno.errorcode[code], reason)
        self.note_refusal("save as a memory", where, code, reason)

    def _drop_kept(self, node: Node, why: str) -> None:
        """A temporary file that cannot be saved (``why``) and finds no room among those kept
        in memory: it goes, as a new file whose save fails does, and that is said."""
        where = self.where(node)
        reason = (
            f"{why}, and the temporary files this mount keeps unsaved already hold "
            f"{TEMP_KEPT_BYTES // 2**20} MiB: removed"
        )
        log.warning("%s: %s", where, reason)
        self.note_refusal("keep unsaved", where, errno.ENOSPC, reason, TEMP_KEPT_HINT)
        self.temporaries.discard(node)
        self._undo_failed_save(node)
