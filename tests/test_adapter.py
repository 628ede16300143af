"""The pyfuse3 adapter without the kernel (the trio side, through pytest-trio): FUSE requests
in, attributes and errnos out, on a real database. Only translation is tested here; what the
filesystem does is test_fs_core's, and the kernel's part test_mount's."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

import pyfuse3
import pytest

from mnemofs import errors
from mnemofs.fs.access import Owner
from mnemofs.fs.adapter import Adapter
from mnemofs.fs.core import ROOT_INO, MemoryFs
from mnemofs.store import MemoryService

OWNER = 4100


@dataclass
class Ctx:
    """What pyfuse3 passes with a request: who asks."""

    uid: int = OWNER
    gid: int = OWNER
    pid: int = os.getpid()
    umask: int = 0o022


@pytest.fixture
def adapter(service: MemoryService) -> Iterator[Adapter]:
    rw = service.create_store("Notes").id
    ro = service.create_store("Docs").id
    service.create_memory(rw, "/a.md", "alpha\n")
    service.create_memory(ro, "/d.md", "docs\n")
    session = service.create_session(
        [{"memory_store_id": rw}, {"memory_store_id": ro, "access": "read_only"}],
        mount_root="/mnt/memory",
    )
    yield Adapter(MemoryFs(service, session, actor=session.id), Owner(OWNER, OWNER))
    assert service.check().problems == []


async def code(coro: object) -> int:
    with pytest.raises(pyfuse3.FUSEError) as info:
        await coro  # type: ignore[misc]
    return info.value.errno


@pytest.mark.trio
async def test_a_save_through_the_requests(adapter: Adapter) -> None:
    notes = await adapter.lookup(ROOT_INO, b"notes", Ctx())
    assert stat.S_IMODE(notes.st_mode) == 0o700
    entry = await adapter.lookup(notes.st_ino, b"a.md", Ctx())
    assert (stat.S_IMODE(entry.st_mode), entry.st_uid, entry.st_size) == (0o600, OWNER, 6)
    info = await adapter.open(entry.st_ino, os.O_WRONLY | os.O_APPEND, Ctx())
    assert await adapter.write(info.fh, 0, b"beta\n") == 5  # O_APPEND: at the end
    await adapter.flush(info.fh)
    await adapter.release(info.fh)
    assert (await adapter.getattr(entry.st_ino, Ctx())).st_size == 11
    store = adapter.fs.mounts[0].store_id
    assert adapter.fs.service.find_memory(store, "/a.md").content == "alpha\nbeta\n"
    memory_id = await adapter.getxattr(entry.st_ino, b"user.mnemofs.memory_id", Ctx())
    assert memory_id.decode().startswith("mem_")


@pytest.mark.trio
async def test_write_only_descriptors_bypass_the_page_cache(adapter: Adapter) -> None:
    """Only a descriptor that cannot read is opened ``direct_io`` (no cached write path, so no
    ``GETXATTR security.capability`` before each write); its writes leave the pages stale for
    the next open, which drops them, and later opens keep them again."""
    notes = await adapter.lookup(ROOT_INO, b"notes", Ctx())
    entry = await adapter.lookup(notes.st_ino, b"a.md", Ctx())

    async def opened(flags: int) -> tuple[int, bool, bool]:
        info = await adapter.open(entry.st_ino, flags, Ctx())
        return info.fh, bool(info.direct_io), bool(info.keep_cache)

    async def closed(fh: int) -> None:
        await adapter.flush(fh)
        await adapter.release(fh)

    reader, direct, keep = await opened(os.O_RDONLY)
    assert (direct, keep) == (False, True)
    writer, direct, _ = await opened(os.O_WRONLY)
    assert direct
    await adapter.write(writer, 6, b"beta\n")
    await closed(writer)
    await closed(reader)
    fh, direct, keep = await opened(os.O_RDONLY)
    assert (direct, keep) == (False, False)  # the write bypassed the pages
    await closed(fh)
    fh, direct, keep = await opened(os.O_RDWR)
    assert (direct, keep) == (False, True)
    await adapter.write(fh, 0, b"A")  # through the page cache: it stays
    await closed(fh)
    fh, direct, keep = await opened(os.O_RDONLY)
    assert (direct, keep) == (False, True)
    await closed(fh)
    made, _ = await adapter.create(notes.st_ino, b"new.md", 0o644, os.O_WRONLY, Ctx())
    assert made.direct_io
    await closed(made.fh)
    made, _ = await adapter.create(notes.st_ino, b"rw.md", 0o644, os.O_RDWR, Ctx())
    assert not made.direct_io
    await closed(made.fh)


@pytest.mark.trio
async def test_refusals_become_errnos(adapter: Adapter) -> None:
    docs = await adapter.lookup(ROOT_INO, b"docs", Ctx())
    doc = await adapter.lookup(docs.st_ino, b"d.md", Ctx())
    assert await code(adapter.open(doc.st_ino, os.O_WRONLY, Ctx())) == errno.EROFS
    assert await code(adapter.mkdir(ROOT_INO, b"x", 0o755, Ctx())) == errno.EROFS
    assert await code(adapter.lookup(docs.st_ino, b"nope", Ctx())) == errno.ENOENT
    stranger = Ctx(uid=4300, gid=4300)
    assert await code(adapter.lookup(docs.st_ino, b"d.md", stranger)) == errno.EACCES
    assert await code(adapter.open(doc.st_ino, os.O_RDONLY, stranger)) == errno.EACCES
    # EROFS first where nothing may change (a read-only store), EPERM where files may be made.
    assert await code(adapter.symlink(docs.st_ino, b"l", b"/etc", Ctx())) == errno.EROFS
    notes = await adapter.lookup(ROOT_INO, b"notes", Ctx())
    assert await code(adapter.symlink(notes.st_ino, b"l", b"/etc", Ctx())) == errno.EPERM
    assert await code(adapter.getxattr(doc.st_ino, b"user.other", Ctx())) == errno.ENODATA
    # ENOSYS: the kernel refuses it ENOTSUP, and every later one without asking (test_mount)
    assert await code(adapter.setxattr(doc.st_ino, b"user.x", b"1", Ctx())) == errno.ENOSYS
    assert await code(adapter.removexattr(doc.st_ino, b"user.x", Ctx())) == errno.ENOSYS
    # The line in .mnemofs/refusals says why, and what to do, for the rule that was broken.
    made = adapter.create(notes.st_ino, b"to do\n.md", 0o644, os.O_WRONLY, Ctx())
    assert await code(made) == errno.EINVAL
    newest = adapter.fs.notices.lines["refusals"][0]
    assert "contains the control character U+000A -> use names without control" in newest


@pytest.mark.trio
async def test_names_made_when_asked_for_are_found(adapter: Adapter) -> None:
    """``.history`` and ``.mnemofs`` are never listed; their entries are made when a lookup
    asks for them, and a name that is nowhere is ENOENT."""
    notes = await adapter.lookup(ROOT_INO, b"notes", Ctx())
    history = await adapter.lookup(notes.st_ino, b".history", Ctx())
    versions = await adapter.lookup(history.st_ino, b"a.md", Ctx())
    assert stat.S_ISDIR(versions.st_mode)
    first = next(n for n, _ in adapter.fs.readdir(versions.st_ino, 0))
    assert first.startswith("0001-created-")
    assert await code(adapter.lookup(history.st_ino, b"b.md", Ctx())) == errno.ENOENT
    notices = await adapter.lookup(ROOT_INO, b".mnemofs", Ctx())
    refusals = await adapter.lookup(notices.st_ino, b"refusals", Ctx())
    assert stat.S_ISREG(refusals.st_mode)
    assert await code(adapter.lookup(notices.st_ino, b"nope", Ctx())) == errno.ENOENT
    assert await code(adapter.lookup(notes.st_ino, b"b.md", Ctx())) == errno.ENOENT


@pytest.mark.trio
async def test_group_access_lets_members_in(service: MemoryService) -> None:
    store = service.create_store("Shared").id
    service.create_memory(store, "/s.md", "shared\n")
    session = service.create_session([{"memory_store_id": store}], mount_root="/m")
    adapter = Adapter(MemoryFs(service, session, actor=session.id), Owner(OWNER, 5000, True))
    shared = await adapter.lookup(ROOT_INO, b"shared", Ctx(uid=4400, gid=5000))
    assert stat.S_IMODE(shared.st_mode) == 0o770
    assert await code(adapter.lookup(ROOT_INO, b"shared", Ctx(uid=4300, gid=4300))) == (
        errno.EACCES
    )


@pytest.mark.trio
async def test_a_save_of_unknown_outcome_is_read_back(
    adapter: Adapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO for a save the database may have committed as it went away: until a look for
    changes has read the stores back, the mount takes none of its writes as seen
    (``RefreshMixin.adopt_own``)."""
    notes = await adapter.lookup(ROOT_INO, b"notes", Ctx())
    entry = await adapter.lookup(notes.st_ino, b"a.md", Ctx())
    info = await adapter.open(entry.st_ino, os.O_WRONLY | os.O_APPEND, Ctx())
    await adapter.write(info.fh, 0, b"more\n")

    def gone(*args: object, **kwargs: object) -> None:
        raise errors.Unavailable("the database went away as the save committed")

    monkeypatch.setattr(adapter.fs.service, "save_file", gone)  # a fault, injected
    assert await code(adapter.flush(info.fh)) == errno.EIO
    monkeypatch.undo()
    await adapter.release(info.fh)
    assert adapter.fs.in_step is False
    adapter.fs.refresh()
    assert adapter.fs.in_step is True
