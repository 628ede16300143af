"""The official SDK's own self-hosted sync against the real server: the worker a sandbox without
a mount runs (``SessionMemoryStores`` in the pinned SDK), on a session token. It downloads every
attached store to the session's mount paths, uploads what changed in the files, pulls what
changed in the store, and deletes what went on either side, by its own rules (its docstring);
these tests hold that every answer it gets from us is one it was written for: no sync of ours
ends in its "failed" or "rejected" lines unless the server really refused the file, and then
for the reason it says."""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.lib.tools._memories import MARKER_PATH, SessionMemoryStores
from anyio.from_thread import start_blocking_portal

from mnemofs.models import Session

from .http_api import Api, api
from .walks import WIDE_DIRS, WIDE_NAMES, Walk, files, stored

__all__ = ["api"]  # the fixture, used by name

TOOLSET = "anthropic.lib.tools.agent_toolset"  # the SDK's sync logs here


class Sandbox:
    """One session's sandbox: the SDK's sync on the session's token, its folders under
    ``tmp/mnt`` (the session's mount root). Its calls run on one event loop in a thread of its
    own (the client's connections belong to the loop that made them), stopped at ``close``."""

    def __init__(self, api: Api, tmp: Path, resources: list[dict[str, Any]]) -> None:
        self.mnt = tmp / "mnt"
        self.session: Session = api.service.create_session(resources, mount_root=str(self.mnt))
        token = api.service.create_session_token(self.session.id).token
        assert token is not None
        self.portal_cm = start_blocking_portal()
        self.portal = self.portal_cm.__enter__()
        self.closed = False
        self.client = anthropic.AsyncAnthropic(
            auth_token=token, base_url=api.server.url, _strict_response_validation=True
        )
        self.sync = SessionMemoryStores(self.client, workdir=tmp / "work")

    def folder(self, slug: str) -> Path:
        return self.mnt / slug

    def run(self, step: Callable[[], Awaitable[None]]) -> None:
        self.portal.call(step)

    def close(self) -> None:
        """Remove the folders the sync made, close its connections, stop its loop (once)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.run(self.sync.dispose)
            self.run(self.client.close)
        finally:
            self.portal_cm.__exit__(None, None, None)

    def download(self) -> None:
        async def download() -> None:
            await self.sync.download(await self.client.beta.sessions.retrieve(self.session.id))

        self.run(download)

    def pass_(self, *, final: bool = False) -> None:
        """One sync of every store: what ``sync_if_due`` runs once its interval is up (or, with
        ``final``, what ``finish`` runs: deletes no longer wait for a second look)."""
        self.run(lambda: self.sync._sync_all(final=final))


@pytest.fixture
def sandbox(api: Api, tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], Sandbox]]:
    """Makes a session's sandbox of the given attachments; closes it after the test."""
    made: list[Sandbox] = []

    def make(resources: list[dict[str, Any]]) -> Sandbox:
        made.append(Sandbox(api, tmp_path, resources))
        return made[-1]

    yield make
    for box in made:
        box.close()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == TOOLSET and r.levelno >= 30]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_sdks_sync_downloads_uploads_pulls_and_deletes(
    api: Api,
    sandbox: Callable[[list[dict[str, Any]]], Sandbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session of two stores, one read-only; more memories than a page of either listing the
    worker asks for (20 with content, 100 without)."""
    caplog.set_level(logging.INFO, logger=TOOLSET)
    s = api.service
    notes, rules = s.create_store("Project Notes"), s.create_store("Team Rules")
    for i in range(130):
        s.create_memory(notes.id, f"/d{i % 7}/m{i}.md", f"note {i}\n")
    s.create_memory(notes.id, "/é/naïve.md", "unicode\n")
    for name in ("keep", "gone", "moved", "clash", "lost"):
        s.create_memory(notes.id, f"/{name}.md", f"{name}\n")
    s.create_memory(rules.id, "/rule.md", "be kind\n")
    box = sandbox(
        [
            {"type": "memory_store", "memory_store_id": notes.id},
            {"type": "memory_store", "memory_store_id": rules.id, "access": "read_only"},
        ],
    )
    box.download()
    mine, theirs = box.folder("project-notes"), box.folder("team-rules")
    assert {"/" + p.name for p in mine.iterdir()} >= {f"/d{i}" for i in range(7)}
    assert files(mine) == stored(s, notes.id)
    assert files(theirs) == stored(s, rules.id)
    assert (mine / MARKER_PATH).read_text() == f"version 1\n{notes.id}"

    # The agent's changes, in its files.
    (mine / "keep.md").write_text("keep, edited here\n")
    (mine / "new" / "deep").mkdir(parents=True)
    (mine / "new" / "deep" / "made.md").write_text("made here\n")
    (mine / "gone.md").unlink()
    (mine / "clash.md").write_text("clash, edited here\n")
    (theirs / "rule.md").write_text("be unkind\n")
    (theirs / "sneaked.md").write_text("not for the store\n")
    # Another writer's, through the API.
    by_path = {m.path: m for m in s.list_memories(notes.id)}
    s.create_memory(notes.id, "/from-api.md", "from the api\n")
    s.update_memory(notes.id, by_path["/clash.md"].id, content="clash, edited there\n")
    s.update_memory(notes.id, by_path["/moved.md"].id, path="/elsewhere/moved.md")
    s.delete_memory(notes.id, by_path["/lost.md"].id)
    s.update_memory(notes.id, by_path["/d0/m0.md"].id, content="note 0, edited there\n")

    box.pass_()
    now = stored(s, notes.id)
    assert now["/keep.md"] == "keep, edited here\n"
    assert now["/new/deep/made.md"] == "made here\n"
    assert now["/gone.md"] == "gone\n"  # a delete waits for a second look
    assert (mine / "clash.md").read_text() == now["/clash.md"] == "clash, edited there\n"
    assert (mine / "from-api.md").read_text() == "from the api\n"
    assert (mine / "elsewhere" / "moved.md").read_text() == "moved\n"
    assert not (mine / "moved.md").exists()
    assert not (mine / "lost.md").exists()
    assert (mine / "d0" / "m0.md").read_text() == "note 0, edited there\n"
    assert stored(s, rules.id) == {"/rule.md": "be kind\n"}  # read-only: never pushed

    box.run(box.sync.finish)
    assert "/gone.md" not in stored(s, notes.id)
    assert files(mine) == stored(s, notes.id)
    assert stored(s, rules.id) == {"/rule.md": "be kind\n"}
    # Every change it made is the session's, one version each.
    signed = s.list_versions(notes.id, session_id=box.session.id, limit=100).data
    assert sorted((v.operation, v.path) for v in signed) == [
        ("created", "/new/deep/made.md"),
        ("deleted", "/gone.md"),
        ("modified", "/keep.md"),
    ]
    assert warnings(caplog) == [
        "memory changed both locally and remotely; keeping the remote version "
        f"path=clash.md memory_store_id={notes.id}"
    ]
    box.close()
    assert list(box.mnt.iterdir()) == []


def test_the_sdks_sync_is_told_what_we_refuse_and_goes_on(
    api: Api,
    sandbox: Callable[[list[dict[str, Any]]], Sandbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Files the store cannot hold get the answers the worker treats as a refusal (400 or 413,
    never retried), it says so once per content and syncs the rest; a full store refuses the
    new file the same way. Nothing refused reaches the store."""
    caplog.set_level(logging.INFO, logger=TOOLSET)
    s = api.service
    notes = s.create_store("Refusals")
    s.create_memory(notes.id, "/a.md", "a\n")
    box = sandbox([{"type": "memory_store", "memory_store_id": notes.id}])
    box.download()
    mine = box.folder("refusals")
    refused = {
        "big.md": "x" * 102_401,  # 413
        "cafe\u0301.md": "not NFC\n",  # 400
        "tab\there.md": "a control character\n",  # 400
        "/".join(["deep"] * 20) + "/far.md": "21 segments\n",  # 400
    }
    for name, text in refused.items():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text(text)
    (mine / "fine.md").write_text("fine\n")
    box.pass_()
    assert stored(s, notes.id) == {"/a.md": "a\n", "/fine.md": "fine\n"}
    said = warnings(caplog)
    assert len(said) == len(refused), said
    for name in refused:
        (line,) = [w for w in said if f"path={name} " in w]
        assert line.startswith("the server rejected this memory file")
    assert "102400" in next(w for w in said if "path=big.md" in w)

    caplog.clear()
    box.pass_()
    assert warnings(caplog) == []  # a refusal is not asked again until the file changes
    (mine / "big.md").write_text("small now\n")
    box.pass_()
    assert stored(s, notes.id)["/big.md"] == "small now\n"

    # A full store: the new file is refused, the edit of a held one goes through.
    s.update_store(notes.id, max_memories=3)
    caplog.clear()
    (mine / "one-too-many.md").write_text("no room\n")
    (mine / "a.md").write_text("a, edited\n")
    box.pass_()
    held = {"/a.md": "a, edited\n", "/big.md": "small now\n", "/fine.md": "fine\n"}
    assert stored(s, notes.id) == held
    (line,) = warnings(caplog)
    assert line.startswith("the server rejected this memory file")
    assert "path=one-too-many.md " in line


def test_the_sdks_rescue_flush_and_pulls_run_many_requests_at_once(
    api: Api,
    sandbox: Callable[[list[dict[str, Any]]], Sandbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's push-only pass at a session's end sends up to 32 saves at once, and a sync
    fetches up to 16 memories at once: every one lands, none is turned away."""
    caplog.set_level(logging.INFO, logger=TOOLSET)
    s = api.service
    notes = s.create_store("Busy")
    for i in range(60):
        s.create_memory(notes.id, f"/old/{i}.md", f"old {i}\n")
    box = sandbox([{"type": "memory_store", "memory_store_id": notes.id}])
    box.download()
    mine = box.folder("busy")
    for i in range(0, 60, 2):
        (mine / "old" / f"{i}.md").write_text(f"old {i}, edited\n")
    for i in range(200):
        (mine / "new" / f"{i % 9}").mkdir(parents=True, exist_ok=True)
        (mine / "new" / f"{i % 9}" / f"{i}.md").write_text(f"new {i}\n")
    box.run(box.sync.flush_writes)
    assert stored(s, notes.id) == files(mine)
    assert len(files(mine)) == 260
    for memory in s.list_memories(notes.id, path_prefix="/new/"):
        s.update_memory(notes.id, memory.id, content=f"{memory.path}, edited there\n")
    box.pass_()
    assert files(mine) == stored(s, notes.id)
    assert (mine / "new" / "0" / "0.md").read_text() == "/new/0/0.md, edited there\n"
    assert warnings(caplog) == []


@pytest.mark.parametrize("seed", [1, 2])
def test_the_sdks_sync_and_the_api_agree_after_a_walk(
    api: Api,
    sandbox: Callable[[list[dict[str, Any]]], Sandbox],
    caplog: pytest.LogCaptureFixture,
    seed: int,
) -> None:
    """The agent changes its files, another writer the store, in random turns with a sync every
    few steps; after the session's last sync the folder and the store hold the same files, and
    the worker met nothing it counts as a failure."""
    caplog.set_level(logging.INFO, logger=TOOLSET)
    s, rng = api.service, random.Random(seed)
    notes = s.create_store(f"Walked {seed}")
    for name in WIDE_NAMES[:3]:
        s.create_memory(notes.id, "/" + name, f"{name} 0\n")
    box = sandbox([{"type": "memory_store", "memory_store_id": notes.id}])
    box.download()
    mine = box.folder(f"walked-{seed}")
    walk = Walk(rng, WIDE_NAMES, WIDE_DIRS)
    for i in range(120):
        name, other = rng.choice(WIDE_NAMES), rng.choice(WIDE_NAMES)
        text, roll = f"{name} {i}\n", rng.random()
        if roll < 0.45:
            if not walk.on_files(mine, name, other, text, roll / 0.45 * 0.5):
                walk.on_more(mine, name, text, rng.random())
        elif roll < 0.8:
            walk.through_api(s, notes.id, name, other, text)
        else:
            walk.step("sync", box.pass_)
    walk.step("last sync", box.run, box.sync.finish)
    assert files(mine) == stored(s, notes.id), walk.last()
    expected = ("changed both locally and remotely", "deleted locally but changed remotely")
    assert [w for w in warnings(caplog) if not any(e in w for e in expected)] == [], walk.last()
