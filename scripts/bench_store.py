"""Store operations per second in a store of 100 and of 10,000 memories (100,000 versions).

    scripts/bench-store [--db-dir DIR] [--pg URL] [--repeat 3]

Each size gets a fresh database seeded in bulk (20 directories, 10 versions per memory) to one
below its size; each timed create fills it and an untimed delete makes room again. Every
operation runs through MemoryService, as the CLI and the mount do. Prints
ops/s (median of --repeat runs) and the ratio 10,000/100: the cost of one operation should not
grow with the store, so every ratio should be near 1 (aim: >= 0.8).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from sqlalchemy import insert, text

from mnemofs.store import MemoryService, make_engine, sha256_hex
from mnemofs.store.schema import (
    contents,
    memories,
    memory_stores,
    memory_versions,
    metadata,
)
from mnemofs.store.service import utc_now

DIRS = 20
VERSIONS_PER_MEMORY = 10
CONTENT = "x" * 2048


def seed(service: MemoryService, count: int) -> tuple[str, list[str]]:
    """A store with ``count`` memories, each with VERSIONS_PER_MEMORY versions, in bulk."""
    store = service.create_store(f"bench-{count}").id
    now = utc_now()
    mems, vers = [], []
    for i in range(count):
        mid = f"mem_bench{i:08d}"
        path = f"/dir{i % DIRS:02d}/file{i:06d}.md"
        for v in range(VERSIONS_PER_MEMORY):
            vers.append(
                {
                    "id": f"memver_bench{i:08d}_{v:02d}",
                    "store_id": store,
                    "memory_id": mid,
                    "operation": "created" if v == 0 else "modified",
                    "path": path,
                    "content_sha256": sha256_hex(CONTENT),
                    "size_bytes": 2048,
                    "created_at": now,
                    "actor": "bench",
                    "redacted_at": None,
                }
            )
        mems.append(
            {
                "id": mid,
                "store_id": store,
                "path": path,
                "content_sha256": sha256_hex(CONTENT),
                "size_bytes": 2048,
                "created_at": now,
                "updated_at": now,
                "head_version_id": vers[-1]["id"],
            }
        )
    with service.engine.sqlalchemy().begin() as conn:
        conn.execute(  # every version and memory holds the one text (kept once, 0014)
            insert(contents), {"store_id": store, "sha256": sha256_hex(CONTENT), "content": CONTENT}
        )
        for start in range(0, len(vers), 5000):
            conn.execute(insert(memory_versions), vers[start : start + 5000])
        for start in range(0, len(mems), 5000):
            conn.execute(insert(memories), mems[start : start + 5000])
        conn.execute(
            memory_stores.update().where(memory_stores.c.id == store).values(memory_count=count)
        )
        if service.engine.dialect == "sqlite":
            conn.execute(text("ANALYZE"))
    return store, [m["id"] for m in mems]


def rate(fn: Callable[[int], object], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - start)


def create_rate(service: MemoryService, store: str, tag: str, n: int = 500) -> float:
    spent = 0.0
    for i in range(n):
        start = time.perf_counter()
        mem = service.create_memory(store, f"/new/{tag}-{i}.md", CONTENT)
        spent += time.perf_counter() - start
        service.delete_memory(store, mem.id)
    return n / spent


def measure(service: MemoryService, store: str, ids: list[str], run: int) -> dict[str, float]:
    step = max(1, len(ids) // 500)
    sample = ids[::step][:500]
    tag = f"r{run}"
    return {
        "create": create_rate(service, store, tag),
        "update": rate(
            lambda i: service.update_memory(
                store, sample[i % len(sample)], content=f"{tag} {i} {CONTENT}"
            ),
            500,
        ),
        "retrieve": rate(lambda i: service.get_memory(store, sample[i % len(sample)]), 2000),
        "list depth=1 (root)": rate(lambda i: service.list_memories(store, depth=1), 300),
        "list depth=0 (100)": rate(lambda i: service.list_memories(store, limit=100), 300),
        "versions of a memory": rate(
            lambda i: service.list_versions(store, memory_id=sample[i % len(sample)]), 1000
        ),
        "versions (page of 100)": rate(lambda i: service.list_versions(store, limit=100), 300),
        # Erasing: merges the whole search index and empties the WAL (docs/decisions.md).
        "redact (erasing)": rate(
            lambda i: service.redact_version(
                store, sample[i].replace("mem_", "memver_") + f"_{run % VERSIONS_PER_MEMORY:02d}"
            ),
            20,
        ),
    }


def bench(url: str, count: int, repeat: int) -> dict[str, float]:
    engine = make_engine(url)
    if engine.dialect == "postgresql":
        with engine.sqlalchemy().begin() as conn:
            names = ", ".join(t.name for t in metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    service = MemoryService(engine, actor="bench")
    store, ids = seed(service, count - 1)
    runs = [measure(service, store, ids, r) for r in range(repeat)]
    service.close()
    engine.dispose()
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-dir", help="where the SQLite files go (default: a temp dir)")
    parser.add_argument("--pg", help="also run on this PostgreSQL URL (its tables are emptied)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    targets = []
    with tempfile.TemporaryDirectory(dir=args.db_dir) as tmp:
        targets.append(("sqlite", lambda n: f"sqlite:///{os.path.join(tmp, f'{n}.db')}"))
        if args.pg:
            targets.append(("postgresql", lambda n: args.pg))
        for backend, url_for in targets:
            small = bench(url_for(100), 100, args.repeat)
            large = bench(url_for(10_000), 10_000, args.repeat)
            print(f"\n{backend}: ops/s, median of {args.repeat}")
            print(f"{'operation':<24}{'100':>10}{'10,000':>10}{'ratio':>8}")
            for key in small:
                print(
                    f"{key:<24}{small[key]:>10.0f}{large[key]:>10.0f}"
                    f"{large[key] / small[key]:>8.2f}"
                )


if __name__ == "__main__":
    main()
