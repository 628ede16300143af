"""The filesystem without the kernel: ``MemoryFs`` and the adapter's error mapping, called
directly on a real database (both backends)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mnemofs import errors, limits
from mnemofs.fs import files, temporaries
from mnemofs.fs.adapter import errno_for
from mnemofs.fs.core import FsError, MemoryFs, Node
from mnemofs.models import Change, Memory
from mnemofs.paths import TEMP_NAME
from mnemofs.store import MemoryService


@pytest.fixture(autouse=True)
def database_checks_clean_after(service: MemoryService) -> Iterator[None]:
    """After every kernel-free filesystem test, the database passes ``db check``."""
    yield
    assert service.check().problems == []


@pytest.fixture
def fs(service: MemoryService) -> MemoryFs:
    rw = service.create_store("Notes").id
    ro = service.create_store("Docs").id
    service.create_memory(rw, "/a.md", "alpha")
    service.create_memory(ro, "/d.md", "docs")
    session = service.create_session(
        [{"memory_store_id": rw}, {"memory_store_id": ro, "access": "read_only"}],
        mount_root="/mnt/memory",
    )
    return MemoryFs(service, session, actor=session.id)


def store_root(fs: MemoryFs, slug: str = "notes") -> Node:
    return fs.root.children[slug]


def write_file(fs: MemoryFs, parent: Node, name: str, data: bytes) -> Node:
    node, fh = fs.create(parent.ino, name)
    fs.write(fh, 0, data)
    fs.flush(fh)
    fs.release(fh)
    return node


def stored(fs: MemoryFs) -> dict[str, str | None]:
    store = fs.mounts[0].store_id
    return {
        m.path: fs.service.get_memory(store, m.id).content
        for m in fs.service.list_memories(store)
        if isinstance(m, Memory)
    }


@contextmanager
def elsewhere(fs: MemoryFs) -> Iterator[MemoryService]:
    """Another connection to the mount's database (a CLI, say): its commits are not the
    mount's own."""
    other = MemoryService(fs.service.engine, actor="cli")  # type: ignore[attr-defined]
    try:
        yield other
    finally:
        other.close()


def code(fn: object, *args: object, **kw: object) -> int:
    with pytest.raises(FsError) as info:
        fn(*args, **kw)  # type: ignore[operator]
    return info.value.errno


def test_tree_mirrors_the_stores(fs: MemoryFs) -> None:
    assert sorted(fs.root.children) == ["docs", "notes"]
    node = fs.lookup(store_root(fs).ino, "a.md")
    assert (node.size, node.memory_id is not None) == (5, True)
    fh = fs.open(node.ino, write=False, truncate=False)
    assert fs.read(fh, 0, 100) == b"alpha"
    assert fs.read(fh, 2, 2) == b"ph"
    fs.release(fh)
    assert fs.lookup(store_root(fs).ino, "missing") is None


def test_readdir_offsets_survive_changes(fs: MemoryFs) -> None:
    root = store_root(fs)
    for i in range(5):
        write_file(fs, root, f"f{i}.md", b"x")
    first = list(fs.readdir(root.ino, 0))[:3]
    offset = first[-1][1].ino
    fs.unlink(root.ino, "f4.md")  # an entry not yet listed goes away
    fs.unlink(root.ino, first[0][0])  # and one already listed
    write_file(fs, root, "late.md", b"y")  # a new one appears
    rest = [name for name, _ in fs.readdir(root.ino, offset)]
    listed = [name for name, _ in first] + rest
    assert len(listed) == len(set(listed))
    assert "late.md" in rest
    assert "f4.md" not in rest
    assert set(listed) >= {"a.md", "f0.md", "f1.md", "f2.md", "f3.md", "late.md"} - {first[0][0]}


def test_a_listing_follows_every_change(fs: MemoryFs) -> None:
    """A directory's sorted listing is kept between READDIRs: every way its entries change
    (here and elsewhere) shows in the next listing, in inode order."""
    root = store_root(fs)
    store = fs.mounts[0].store_id

    def listed() -> list[str]:
        entries = [node for _, node in fs.readdir(root.ino, 0)]
        assert [n.ino for n in entries] == sorted(n.ino for n in entries)
        return sorted(node.name for node in entries)

    assert listed() == ["a.md"]
    write_file(fs, root, "b.md", b"b")
    assert listed() == ["a.md", "b.md"]
    fs.rename(root.ino, "a.md", root.ino, "c.md")
    assert listed() == ["b.md", "c.md"]
    fs.rename(root.ino, "b.md", root.ino, "c.md")  # over another entry
    assert listed() == ["c.md"]
    sub = fs.mkdir(root.ino, "sub")
    assert listed() == ["c.md", "sub"]
    fs.rename(root.ino, "c.md", sub.ino, "c.md")  # out of the directory
    assert listed() == ["sub"]
    assert [name for name, _ in fs.readdir(sub.ino, 0)] == ["c.md"]
    fs.service.create_memory(store, "/elsewhere.md", "e", actor="cli")
    fs.refresh()
    assert listed() == ["elsewhere.md", "sub"]
    fs.unlink(sub.ino, "c.md")
    fs.rmdir(root.ino, "sub")
    assert listed() == ["elsewhere.md"]


def test_temporary_files_stay_in_memory(fs: MemoryFs) -> None:
    root = store_root(fs)
    assert TEMP_NAME.match("sedAb12Cd")
    assert TEMP_NAME.match("tmpk2j4_x9a")
    assert not TEMP_NAME.match("notes.md")
    write_file(fs, root, "sedAb12Cd", b"temp")
    assert "/sedAb12Cd" not in stored(fs)
    write_file(fs, root, "tmpabcd1234", b"kept")
    fs.promote_temporaries()  # just closed: still in its grace period (found by the hammer)
    assert "/tmpabcd1234" not in stored(fs)
    fs.unlink(root.ino, "sedAb12Cd")
    fs.promote_temporaries(now=10**12)  # long after the grace period
    assert stored(fs)["/tmpabcd1234"] == "kept"
    assert [v.operation for v in fs.service.list_versions(fs.mounts[0].store_id)][:1] == ["created"]


def test_temporary_files_kept_unsaved_are_bounded(
    fs: MemoryFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temporary files that cannot be saved stay in memory only up to ``TEMP_KEPT_BYTES`` in
    all (an agent could otherwise fill the daemon with them): the newest beyond it goes, and
    that is said."""
    monkeypatch.setattr(temporaries, "TEMP_KEPT_BYTES", 100)
    root = store_root(fs)
    for name in ("a.tmp", "b.tmp", "c.tmp"):
        write_file(fs, root, name, b"\0" * 40)  # bytes no memory holds
    assert fs.promote_temporaries(now=10**12) == 0
    assert sorted(n for n in root.children if n.endswith(".tmp")) == ["a.tmp", "b.tmp"]
    lines = list(fs.notices.lines["refusals"])
    assert len(lines) == 3, lines
    assert "c.tmp  keep unsaved: ENOSPC: the store refused it (" in lines[0], lines
    assert "MiB: removed -> remove temporary files" in lines[0], lines
    assert all("save as a memory: EILSEQ" in line for line in lines[1:]), lines
    fs.promote_temporaries(now=10**12)  # kept as they are: nothing more is said
    assert len(fs.notices.lines["refusals"]) == 3


def test_files_held_open_are_bounded(fs: MemoryFs, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files opened and written but never closed grew the daemon without end (the store's
    limits count saved memories only). Past ``BUFFER_BYTES`` in all, a write that grows a
    file is ENOSPC (and that file is not saved), an open that would add one ENFILE; once
    files are closed there is room again."""
    each = 2000 + files.BUFFER_OVERHEAD_BYTES
    monkeypatch.setattr(files, "BUFFER_BYTES", 4 * each)  # four open files of 2,000 bytes
    root = store_root(fs)
    saved = write_file(fs, root, "saved.md", b"saved before\n")  # closed: holds nothing
    handles = []
    for i in range(4):
        _, fh = fs.create(root.ino, f"n{i}.md" if i else "n0.tmp")  # temporary or not
        fs.write(fh, 0, b"x" * 2000)
        handles.append(fh)
    before = stored(fs)
    assert code(fs.create, root.ino, "n4.md") == errno.ENFILE
    assert "n4.md" not in root.children
    assert code(fs.open, saved.ino, write=False, truncate=False) == errno.ENFILE
    assert code(fs.write, handles[1], 2000, b"more") == errno.ENOSPC
    assert fs.write(handles[1], 0, b"y" * 10) == 10  # growing nothing: room enough
    assert code(fs.flush, handles[1]) == errno.ENOSPC  # told again at close: not saved
    for fh in handles:
        if fh != handles[1]:
            fs.flush(fh)
        fs.release(fh)
    assert stored(fs) == before | {"/n2.md": "x" * 2000, "/n3.md": "x" * 2000}
    # Closed: room again, and a file that shrank is counted as it is.
    fh = fs.open(saved.ino, write=False, truncate=False)
    assert fs.read(fh, 0, 100) == b"saved before\n"
    fs.release(fh)
    write_file(fs, root, "n4.md", b"room again\n")
    assert stored(fs)["/n4.md"] == "room again\n"


def test_a_refused_temporary_file_is_tried_again_once_it_changes(fs: MemoryFs) -> None:
    """A temporary file the store refuses stays in memory, told once; when its bytes change
    it is tried again, and saved if the store takes them now."""
    root = store_root(fs)
    node = write_file(fs, root, "page.md.tmp", b"half\0written")
    later = 10**12  # long after the grace period
    assert fs.promote_temporaries(now=later) == 0
    assert fs.promote_temporaries(now=later) == 0
    fh = fs.open(node.ino, write=False, truncate=False)
    assert fs.read(fh, 0, 100) == b"half\0written"
    fs.release(fh)
    assert "/page.md.tmp" not in stored(fs)
    lines = fs.notices.lines["refusals"]
    assert len(lines) == 1, lines
    assert "page.md.tmp  save as a memory: EILSEQ: " in lines[0], lines
    fh = fs.open(node.ino, write=True, truncate=True)
    fs.write(fh, 0, b"whole\n")
    fs.flush(fh)
    fs.release(fh)
    assert fs.promote_temporaries(now=later) == 1
    assert stored(fs)["/page.md.tmp"] == "whole\n"
    assert len(fs.notices.lines["refusals"]) == 1
    # One whose write was refused (and told to its writer) goes, as a new file does.
    _, fh = fs.create(root.ino, "big.md.tmp")
    assert code(fs.write, fh, 0, b"x" * (limits.MAX_CONTENT_BYTES + 1)) == errno.EFBIG
    fs.release(fh)
    assert fs.promote_temporaries(now=later) == 0
    assert "big.md.tmp" not in root.children
    assert len(fs.notices.lines["refusals"]) == 1


def test_rename_over_and_directories(fs: MemoryFs) -> None:
    root = store_root(fs)
    target = fs.lookup(root.ino, "a.md")
    write_file(fs, root, "a.md.tmp", b"new alpha")
    fs.rename(root.ino, "a.md.tmp", root.ino, "a.md")
    assert stored(fs) == {"/a.md": "new alpha"}
    assert fs.lookup(root.ino, "a.md").memory_id == target.memory_id
    sub = fs.mkdir(root.ino, "sub")
    write_file(fs, sub, "b.md", b"b")
    _, fh = fs.create(sub.ino, "open.md")  # unsaved when its directory moves
    fs.write(fh, 0, b"o")
    fs.rename(root.ino, "sub", root.ino, "moved")
    fs.flush(fh)
    fs.release(fh)
    assert stored(fs) == {"/a.md": "new alpha", "/moved/b.md": "b", "/moved/open.md": "o"}
    assert code(fs.rename, root.ino, "moved", root.ino, "a.md") == errno.ENOTDIR
    assert code(fs.rmdir, root.ino, "moved") == errno.ENOTEMPTY
    other = store_root(fs, "docs")
    assert code(fs.rename, root.ino, "a.md", other.ino, "a.md") == errno.EROFS
    assert code(fs.rename, root.ino, "a.md", fs.root.ino, "a.md") == errno.EROFS


def test_a_temporary_file_renamed_over_a_file_deleted_elsewhere_makes_it_again(
    fs: MemoryFs,
) -> None:
    """``sed -i`` and ``os.replace`` save by renaming a temporary file (never saved) over the
    file: if another writer deleted that file meanwhile, the rename still saves the bytes, as
    a close() of the open file would, instead of failing."""
    root = store_root(fs)
    target = fs.lookup(root.ino, "a.md")
    write_file(fs, root, "sedAbC123", b"edited alpha")
    assert "/sedAbC123" not in stored(fs)
    store = fs.mounts[0].store_id
    fs.service.delete_memory(store, target.memory_id)  # another writer, before we hear of it
    before = fs.mounts[0].count
    fs.rename(root.ino, "sedAbC123", root.ino, "a.md")
    assert stored(fs) == {"/a.md": "edited alpha"}
    node = fs.lookup(root.ino, "a.md")
    assert node.memory_id != target.memory_id
    assert fs.service.get_memory(store, node.memory_id).content == "edited alpha"
    assert fs.mounts[0].count == before + 1
    assert "sedAbC123" not in root.children


def test_refusals_leave_the_store_unchanged(fs: MemoryFs) -> None:
    root = store_root(fs)
    before = stored(fs)
    node = fs.lookup(root.ino, "a.md")
    fh = fs.open(node.ino, write=True, truncate=False)
    assert code(fs.write, fh, 102_400, b"x") == errno.EFBIG
    assert code(fs.flush, fh) == errno.EFBIG
    fs.release(fh)
    fh = fs.open(node.ino, write=True, truncate=True)
    assert code(fs.write, fh, 0, b"ok \xff\xfe") == errno.EILSEQ  # never UTF-8: at the write
    assert bytes(node.file.data) == b""  # type: ignore[union-attr]
    assert code(fs.flush, fh) == errno.EILSEQ  # and at the close: the truncation is not saved
    fs.release(fh)
    fh = fs.open(node.ino, write=True, truncate=True)
    fs.write(fh, 0, b"\x80")  # a continuation byte: only the whole file can tell
    with pytest.raises(errors.InvalidContent):
        fs.flush(fh)
    fs.release(fh)
    fh = fs.open(node.ino, write=False, truncate=False)
    assert fs.read(fh, 0, 100) == b"alpha"  # the buffer went back to the saved content
    fs.release(fh)
    docs = store_root(fs, "docs")
    assert code(fs.create, docs.ino, "x.md") == errno.EROFS
    assert code(fs.open, fs.lookup(docs.ino, "d.md").ino, write=True, truncate=False) == (
        errno.EROFS
    )
    assert code(fs.mkdir, fs.root.ino, "x") == errno.EROFS
    assert code(fs.create, root.ino, "n" * 256) == errno.ENAMETOOLONG
    assert stored(fs) == before


def test_changes_elsewhere_are_picked_up(fs: MemoryFs) -> None:
    root = store_root(fs)
    node = fs.lookup(root.ino, "a.md")
    store = fs.mounts[0].store_id
    assert node.memory_id is not None
    fs.service.update_memory(store, node.memory_id, content="changed", actor="cli")
    fs.service.create_memory(store, "/dir/new.md", "new", actor="cli")
    invalidations = fs.refresh()
    assert any(i.kind == "inode" and i.ino == node.ino for i in invalidations)
    fh = fs.open(node.ino, write=False, truncate=False)
    assert fs.read(fh, 0, 100) == b"changed"
    fs.release(fh)
    assert fs.lookup(fs.lookup(root.ino, "dir").ino, "new.md").size == 3
    fs.service.delete_memory(store, node.memory_id, actor="cli")
    fs.refresh()
    assert fs.lookup(root.ino, "a.md") is None
    assert fs.refresh() == []  # nothing new


def test_errno_for_each_domain_error() -> None:
    cases = {
        errors.ContentTooLarge("x"): errno.EFBIG,
        errors.StoreFull("x"): errno.ENOSPC,
        errors.InvalidContent("x"): errno.EILSEQ,
        errors.NameTooLong("x"): errno.ENAMETOOLONG,
        errors.InvalidRequest("x"): errno.EINVAL,
        errors.NotFound("x"): errno.ENOENT,
        errors.Conflict("x"): errno.EEXIST,
        errors.StoreArchived("x"): errno.EROFS,
        errors.Unavailable("x"): errno.EIO,
        FsError(errno.EXDEV, "x"): errno.EXDEV,
        RuntimeError("x"): errno.EIO,
    }
    for exc, expected in cases.items():
        assert errno_for(exc) == expected, exc


def test_directories_made_elsewhere_appear(fs: MemoryFs) -> None:
    store = fs.mounts[0].store_id
    fs.service.make_directory(store, "/x")
    fs.service.make_directory(store, "/y/z")
    fs.refresh()
    root = store_root(fs)
    assert fs.lookup(root.ino, "x").is_dir
    assert fs.lookup(fs.lookup(root.ino, "y").ino, "z").is_dir


def test_create_of_a_name_made_meanwhile_opens_it(fs: MemoryFs) -> None:
    """The kernel sends CREATE when its cache says "absent"; another mount may have made the
    file since. Without O_EXCL that is an open (and truncate) of that file, as on any
    filesystem; with O_EXCL it is EEXIST."""
    root = store_root(fs)
    assert code(fs.create, root.ino, "a.md") == errno.EEXIST
    node, fh = fs.create(root.ino, "a.md", exclusive=False, truncate=True)
    assert node is fs.lookup(root.ino, "a.md")
    assert fs.read(fh, 0, 100) == b""
    fs.write(fh, 0, b"replaced")
    fs.flush(fh)
    fs.release(fh)
    assert stored(fs)["/a.md"] == "replaced"
    fs.mkdir(root.ino, "d")
    assert code(fs.create, root.ino, "d", exclusive=False) == errno.EISDIR


def test_append_lands_at_the_end_whatever_offset_the_kernel_says(fs: MemoryFs) -> None:
    """The kernel's O_APPEND offset is its own idea of the size: another descriptor's O_TRUNC
    open can reach the daemon between that write's offset and the write itself."""
    root = store_root(fs)
    node = fs.lookup(root.ino, "a.md")
    appender = fs.open(node.ino, write=True, truncate=False, append=True)
    rewriter = fs.open(node.ino, write=True, truncate=True)  # the buffer is empty now
    fs.write(appender, 5, b"line\n")  # the kernel still believed the file 5 bytes long
    fs.write(rewriter, 0, b"rewritten\n")  # the rewriter's own offset is honoured
    fs.flush(appender)
    fs.release(appender)
    fs.flush(rewriter)
    fs.release(rewriter)
    assert stored(fs)["/a.md"] == "rewritten\n"  # "line\n" first, overwritten from 0
    plain = fs.open(node.ino, write=True, truncate=False)
    # Without O_APPEND a write past the end would leave a hole of NULs: refused at once.
    assert code(fs.write, plain, 20, b"x") == errno.EILSEQ
    assert bytes(node.file.data) == b"rewritten\n"  # type: ignore[union-attr]
    assert code(fs.flush, plain) == errno.EILSEQ
    fs.release(plain)
    assert stored(fs)["/a.md"] == "rewritten\n"


def test_a_folded_temporary_file_vanishes_from_other_mounts(service: MemoryService) -> None:
    """A fold drops the temporary memory's history; the change feed still says it is gone."""
    store = service.create_store("Notes").id
    service.create_memory(store, "/a.md", "alpha\n", actor="cli")
    one, two = (
        service.create_session([{"memory_store_id": store}], mount_root=f"/m{i}") for i in (1, 2)
    )
    writer, watcher = MemoryFs(service, one, actor=one.id), MemoryFs(service, two, actor=two.id)
    root = store_root(writer)
    write_file(writer, root, "draft", b"new alpha\n")  # a name no temp pattern knows
    watcher.refresh()
    assert "draft" in store_root(watcher).children
    writer.rename(root.ino, "draft", root.ino, "a.md")  # folded: "draft" leaves no history
    assert [v.path for v in service.list_versions(store)].count("/draft") == 0
    watcher.refresh()
    assert sorted(store_root(watcher).children) == ["a.md"]
    fh = watcher.open(
        watcher.lookup(store_root(watcher).ino, "a.md").ino, write=False, truncate=False
    )
    assert watcher.read(fh, 0, 100) == b"new alpha\n"
    watcher.release(fh)


def test_the_content_cache_is_bounded_in_bytes(
    fs: MemoryFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mnemofs.fs.files.CONTENT_CACHE_BYTES", 10_000)
    notes = fs.root.children["notes"]
    for i in range(10):
        _, fh = fs.create(notes.ino, f"c{i}.md")
        fs.write(fh, 0, b"x" * 3000)
        fs.flush(fh)
        fs.release(fh)
    assert fs._content_bytes == sum(len(v) for v in fs._content.values()) <= 10_000
    assert len(fs._content) == 3  # the newest three files of 3,000 bytes
    fs.unlink(notes.ino, "c9.md")
    assert fs._content_bytes == sum(len(v) for v in fs._content.values())


def test_notice_log_size_follows_its_text() -> None:
    """The size ``stat`` shows for ``.mnemofs/refusals`` is kept line by line, also once the
    oldest lines drop out (the kernel reads no further than it)."""
    from mnemofs.fs.nodes import NoticeLog

    log = NoticeLog()
    for i in range(NoticeLog.KEPT + 50):
        log.add("refusals", f"line {i} ✓ " + "x" * (i % 7))
        assert log.sizes["refusals"] == len(log.text("refusals"))
    assert len(log.lines["refusals"]) == NoticeLog.KEPT


def test_a_refused_rename_leaves_the_directory_as_it_was(fs: MemoryFs) -> None:
    """A rename the store refuses (the source's bytes are no text) changes nothing: both
    names stay, and so do the directory's mtime and ctime, over a saved target and over one
    still open and never saved (which is taken out of the directory and put back)."""
    root = store_root(fs)
    write_file(fs, root, "page.md.tmp", b"downloaded\0page")
    _, fh = fs.create(root.ino, "new.md")
    for target in ("a.md", "new.md"):
        before = (root.mtime_ns, root.ctime_ns)
        with pytest.raises(errors.InvalidContent):
            fs.rename(root.ino, "page.md.tmp", root.ino, target)
        assert (root.mtime_ns, root.ctime_ns) == before, target
        assert {"page.md.tmp", "a.md", "new.md"} <= set(root.children)
    fs.release(fh)
    assert stored(fs) == {"/a.md": "alpha", "/new.md": ""}


def reads_of_changes(fs: MemoryFs, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many changes each ``changes`` call of ``fs``'s service returns, from now on."""
    seen: list[int] = []
    real = fs.service.changes

    def counted(*args: object, **kwargs: object) -> list[Change]:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(len(found))
        return found

    monkeypatch.setattr(fs.service, "changes", counted)
    return seen


def test_own_changes_are_taken_as_seen(fs: MemoryFs, monkeypatch: pytest.MonkeyPatch) -> None:
    """A look that heard nobody else write (SQLite's ``data_version`` unchanged) takes what
    the mount wrote since as seen: the next look for changes reads none of it back. Where
    that cannot be said (PostgreSQL), it reads them back, as ever."""
    root = store_root(fs)
    fs.refresh()
    version = fs.service.data_version()
    write_file(fs, root, "b.md", b"bee")
    fs.mkdir(root.ino, "d")
    fs.rename(root.ino, "b.md", root.ino, "c.md")
    fs.unlink(root.ino, "a.md")
    fs.adopt_own(version)
    reads = reads_of_changes(fs, monkeypatch)
    invalidations = fs.refresh()
    if version is None:  # PostgreSQL: the three versions read back
        assert reads == [3]
        return
    assert (invalidations, reads) == ([], [])


def test_a_change_from_elsewhere_is_never_taken_as_own(
    fs: MemoryFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = store_root(fs)
    fs.refresh()
    version = fs.service.data_version()
    write_file(fs, root, "b.md", b"bee")
    with elsewhere(fs) as other:
        other.create_memory(fs.mounts[0].store_id, "/theirs.md", "theirs")
    fs.adopt_own(version)  # someone else committed since the look: nothing is taken
    fs.refresh()
    assert fs.lookup(root.ino, "theirs.md") is not None


def test_a_directory_move_is_read_back(fs: MemoryFs) -> None:
    """A directory's move gives every memory under it a new version the tree does not know:
    nothing is taken as seen until a look for changes has read them."""
    root = store_root(fs)
    sub = fs.mkdir(root.ino, "d")
    write_file(fs, sub, "f.md", b"eff")
    fs.refresh()
    version = fs.service.data_version()
    fs.rename(root.ino, "d", root.ino, "e")
    fs.adopt_own(version)
    fs.refresh()
    node = fs.lookup(fs.lookup(root.ino, "e").ino, "f.md")
    assert node.memory_id is not None
    head = fs.service.get_memory(fs.mounts[0].store_id, node.memory_id)
    assert (head.path, node.version_id) == ("/e/f.md", head.memory_version_id)


def test_a_refresh_cut_short_is_taken_up_again(
    fs: MemoryFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away between a refresh's look at the stores' revisions and its read
    of what changed: the next refresh reads those changes, though the revision it saw is
    not new to it any more."""
    root = store_root(fs)
    fs.refresh()
    with elsewhere(fs) as other:
        other.create_memory(fs.mounts[0].store_id, "/theirs.md", "theirs")

    def gone(*args: object, **kwargs: object) -> None:
        raise errors.Unavailable("the database went away mid-refresh")

    monkeypatch.setattr(fs.service, "changes", gone)  # a fault, injected
    with pytest.raises(errors.Unavailable):
        fs.refresh()
    monkeypatch.undo()
    assert fs.in_step is False
    fs.refresh()
    assert fs.lookup(root.ino, "theirs.md") is not None
    assert fs.in_step is True


@pytest.mark.trio
async def test_a_look_that_failed_is_taken_again(
    fs: MemoryFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that fails for a reason other than the database (a fault, injected once) is
    tried again at the watcher's next look, within a second, not only once someone commits
    again: the change it failed to show may be the last for a long time."""
    import trio

    from mnemofs.fs.mount import Rest, _watch_changes

    root = store_root(fs)
    refresh = fs.refresh
    faults = [RuntimeError("a fault, injected")]
    shown = trio.Event()

    def failing_once(states: object = None) -> list[object]:
        store = fs.mounts[0].store_id
        if faults and fs.service.store_states([store])[store].revision != fs.mounts[0].revision:
            raise faults.pop()  # a refresh with something to show
        refresh()
        if fs.lookup(root.ino, "theirs.md") is not None:
            shown.set()
        return []  # no kernel here: nothing to drop

    monkeypatch.setattr(fs, "refresh", failing_once)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_changes, fs, fs.service, Rest(False))
        await trio.sleep(0.2)  # its first look is behind it
        with elsewhere(fs) as other:
            other.create_memory(fs.mounts[0].store_id, "/theirs.md", "theirs")
        with trio.move_on_after(3.0):
            await shown.wait()
        nursery.cancel_scope.cancel()
    assert faults == []  # the fault happened
    assert fs.lookup(root.ino, "theirs.md") is not None


def test_a_refresh_reads_every_batch_of_changes(
    fs: MemoryFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More changes than a refresh reads at a time (``REFRESH_CHANGES``, two here): it reads
    batch after batch, and takes the store's revision as seen only with the last. It read
    one and took the revision: the rest waited for the store's next change."""
    from mnemofs.fs import refresh

    monkeypatch.setattr(refresh, "REFRESH_CHANGES", 2)
    root = store_root(fs)
    fs.refresh()
    with elsewhere(fs) as other:
        for i in range(5):
            other.create_memory(fs.mounts[0].store_id, f"/theirs-{i}.md", f"theirs {i}")
        other.make_directory(fs.mounts[0].store_id, "/made")
    fs.refresh()
    assert [fs.lookup(root.ino, f"theirs-{i}.md") is not None for i in range(5)] == [True] * 5
    assert fs.lookup(root.ino, "made") is not None


def test_directories_looked_at_next_are_bounded_by_the_tree(fs: MemoryFs) -> None:
    """Each directory made or changed is looked at by the next look at the store (one it no
    longer has goes); a mount nobody else writes to never looks, so a removed one is not kept
    for it: folders made and removed without end hold no memory."""
    root = store_root(fs)
    for i in range(200):
        sub = fs.mkdir(root.ino, f"d{i}")
        fs.mkdir(sub.ino, "e")
        fs.rmdir(sub.ino, "e")
        fs.rmdir(root.ino, f"d{i}")
    assert len(fs.dirs_touched) <= 2  # at most the stores' own folders
    assert not any(d.unlinked for d in fs.dirs_touched)
