"""Several mounts of one store, written at once: every acknowledged save is a version.

(The first step of issue 4's shared-store work; the crash and server-restart tests come there.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from mnemofs.store import Engine, MemoryService

from .mounted import mounted, wait_for

WRITER = textwrap.dedent(
    """
    import json, os, sys
    path, shared, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    done = []
    for i in range(count):
        for target in (path, shared):
            text = f"{tag} {i}\\n"
            with open(target, "w") as f:
                f.write(text)
            done.append([os.path.basename(target), text])  # acknowledged: close returned
    print(json.dumps(done))
    """
)


def test_two_mounts_lose_no_save(engine: Engine, db_url: str, tmp_path: Path) -> None:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Shared").id
    roots = [tmp_path / "m1", tmp_path / "m2"]
    sessions = [
        service.create_session([{"memory_store_id": store}], mount_root=str(r)) for r in roots
    ]
    with mounted(db_url, sessions[0].id, roots[0]), mounted(db_url, sessions[1].id, roots[1]):
        # One writer per mount: writers in one mount share each file's buffer, as processes
        # on any filesystem share a file, so their saves interleave by design.
        writers = enumerate(roots)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(root / "shared" / f"own-{w}.md"),
                 str(root / "shared" / "both.md"), f"w{w}", "40"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for w, root in writers
        ]  # fmt: skip
        outputs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
        acknowledged = [json.loads(out) for out, _ in outputs]
        # Each mount shows the other's files within a second.
        assert wait_for(lambda: (roots[1] / "shared" / "own-0.md").exists(), timeout=2.0)
        assert wait_for(lambda: (roots[0] / "shared" / "own-1.md").exists(), timeout=2.0)

    saved: dict[str, list[str | None]] = {}
    for version in reversed(list(service.list_versions(store))):
        content = service.get_version(store, version.id).content
        saved.setdefault(version.path.lstrip("/"), []).append(content)
    for w, acks in enumerate(acknowledged):
        own = [text for name, text in acks if name == f"own-{w}.md"]
        # Every save of a writer's own file, in order (identical saves make no version).
        assert saved[f"own-{w}.md"] == own, w
    both_acked = {text for acks in acknowledged for name, text in acks if name == "both.md"}
    both_saved = [c for c in saved["both.md"] if c is not None]
    assert set(both_saved) == both_acked  # none lost, none invented
    head = service.find_memory(store, "/both.md")
    assert head.content == both_saved[-1]  # the last commit is the head
    service.close()
