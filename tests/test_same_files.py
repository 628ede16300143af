"""Two processes writing the same files through one mount (issue 11): one rewriting, one
appending, both replacing files onto each other. No valid save may be refused, and every
version is made of whole records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mnemofs.models import Memory
from mnemofs.store import Engine, MemoryService

from .mounted import mounted, run

pytestmark = pytest.mark.mounted

# Every write is whole 32-byte records and every offset a multiple of 32, so whatever the
# interleaving, a file is a run of whole records (as on any POSIX filesystem); a NUL byte or a
# torn record means a write landed where it should not have.
WRITER = textwrap.dedent(
    """
    import errno, json, os, random, sys, time
    folder, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    rng = random.Random(mode)
    names = [f"f{i}.md" for i in range(6)]
    def record(n):
        return f"{mode} {os.getpid()} {n:08d}".ljust(31, ".") + "\\n"
    acked, errors, n = 0, {}, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
        path = os.path.join(folder, rng.choice(names))
        try:
            if rng.random() < 0.15:
                os.replace(path, os.path.join(folder, rng.choice(names)))
                continue
            if mode == "rewrite":
                with open(path, "w") as f:
                    f.write("".join(record(n) for _ in range(rng.randrange(1, 5))))
            else:
                with open(path, "a") as f:
                    f.write(record(n))
            acked += 1
        except OSError as exc:
            name = errno.errorcode.get(exc.errno, str(exc.errno))
            errors[name] = errors.get(name, 0) + 1
    print(json.dumps({"acked": acked, "errors": errors}))
    """
)
RECORD = re.compile(r"^(rewrite|append) \d+ \d{8}\.*$")


def test_rewriter_and_appender_on_the_same_files(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Shared").id
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root):
        folder = root / "shared"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(folder), mode, "8"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for mode in ("rewrite", "append")
        ]
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out))
        on_mount = {p.name: p.read_bytes() for p in folder.iterdir()}
    for result in results:
        assert result["acked"] > 100, results
        # ENOENT: the other writer renamed the file away; nothing else is a valid refusal.
        assert set(result["errors"]) <= {"ENOENT"}, results
    torn = []
    for version in service.list_versions(store):
        if version.operation == "deleted":
            continue
        content = service.get_version(store, version.id).content or ""
        lines = content.split("\n")
        if (lines.pop() != "" and content) or not all(RECORD.match(line) for line in lines):
            torn.append((version.path, content[:200]))
    assert torn == []
    heads = {
        m.path.lstrip("/"): (service.get_memory(store, m.id).content or "").encode()
        for m in service.list_memories(store)
        if isinstance(m, Memory)
    }
    assert heads == on_mount
    assert run(sys.executable, "-m", "mnemofs", "--db", db_url, "db", "check").stdout.startswith(
        "ok"
    )
    service.close()
