"""The daemon killed with SIGKILL while writers save: nothing acknowledged is lost, nothing is
half-written, the database checks clean, and the next mount cleans up the dead one by itself.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mnemofs.store import Engine, MemoryService

from .mounted import mounted, run

pytestmark = pytest.mark.mounted

# A writer saves files in a loop, in one of a few names of its own, and after each close() that
# returned records what it saved. It stops at the first error (the daemon is gone).
WRITER = textwrap.dedent(
    """
    import json, os, sys
    folder, tag, acks = sys.argv[1], sys.argv[2], sys.argv[3]
    log = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    i = 0
    while True:
        i += 1
        name = f"{tag}-{i % 4}.md"
        body = f"{tag}:{i} " * (1 + (i * 7919) % 6000)
        text = f"begin {tag} {i}\\n{body}\\nend {tag} {i}\\n"
        try:
            with open(os.path.join(folder, name), "w") as f:
                f.write(text)
        except OSError as exc:
            os.write(log, (json.dumps({"error": exc.errno}) + "\\n").encode())
            break
        os.write(log, (json.dumps({"name": name, "i": i}) + "\\n").encode())
    """
)


def content_for(tag: str, i: int) -> str:
    body = f"{tag}:{i} " * (1 + (i * 7919) % 6000)
    return f"begin {tag} {i}\n{body}\nend {tag} {i}\n"


def read_acks(path: Path) -> tuple[list[tuple[str, int]], int | None]:
    acks: list[tuple[str, int]] = []
    error = None
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "error" in entry:
            error = entry["error"]
        else:
            acks.append((entry["name"], entry["i"]))
    return acks, error


def test_sigkill_while_saving_loses_no_acknowledged_save(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Crash").id
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    tags = ["a", "b", "c"]
    logs = {tag: tmp_path / f"acks-{tag}.jsonl" for tag in tags}

    with mounted(db_url, session.id, root) as first:
        folder = root / "crash"
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, str(folder), tag, str(logs[tag])])
            for tag in tags
        ]
        try:
            # Let every writer get going, then kill the daemon in the middle of their saves.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(
                log.exists() and len(log.read_text().splitlines()) >= 20 for log in logs.values()
            ):
                time.sleep(0.05)
            first.process.kill()
            first.process.wait(timeout=10)
            for writer in writers:
                writer.wait(timeout=30)
        finally:
            for writer in writers:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait()

        # The dead daemon left its mount behind: the kernel answers ENOTCONN.
        with pytest.raises(OSError) as stale:
            os.stat(folder)
        assert stale.value.errno == errno.ENOTCONN

        # Mounting again at the same place cleans that up by itself.
        with mounted(db_url, session.id, root):
            per_writer: dict[str, list[tuple[str, int]]] = {tag: [] for tag in tags}
            last: dict[str, str] = {}
            for version in reversed(list(service.list_versions(store))):  # commit order
                content = service.get_version(store, version.id).content
                assert content is not None
                _, tag, i = content.split("\n", 1)[0].split()
                name = version.path.rsplit("/", 1)[1]
                # Nothing half-written: every version is one whole save of that file.
                assert (name, content) == (f"{tag}-{int(i) % 4}.md", content_for(tag, int(i)))
                per_writer[tag].append((name, int(i)))
                last[name] = content
            for name, content in last.items():
                assert (folder / name).read_text() == content

            for tag in tags:
                acks, error = read_acks(logs[tag])
                assert len(acks) >= 20
                assert error in (errno.ENOTCONN, errno.ECONNABORTED), error
                # Every acknowledged save is a version, in order; only the one save in flight
                # when the daemon died may have committed without its close() returning.
                saved = per_writer[tag]
                assert saved[: len(acks)] == acks
                assert len(saved) - len(acks) in (0, 1)

    report = service.check()
    assert report.problems == []
    assert run(sys.executable, "-m", "mnemofs", "--db", db_url, "db", "check").returncode == 0
    service.close()
