"""Seed 001's figures: what a create costs in a full capacity pool that evicts, against one in
a store with room, and how long a search over a pool of 10,000 memories takes.

    scripts/bench-pools [--pg URL] [--rounds 5] [--creates 200]

- **Creates**: a pool of 500 over 50 stores (10 memories each, full, evict-lru), so every create
  evicts the least recently accessed memory of the pool in its transaction; beside it a plain
  store with room. Creates alternate between the two in rounds; ops/s are medians of the
  rounds, and the ratio pool/plain is what evicting costs.
- **Search**: a pool of 10,000 memories over 50 stores (one general, 49 end users'), notes of
  ~60 words; p50 and p95 of ``search_pool`` for a few queries, for the whole pool and as one
  end user sees it (general + their own).
Everything runs through ``MemoryService`` (what the CLI, the API and a mount call).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from mnemofs.store import MemoryService, make_engine

WORDS = [
    "status",
    "report",
    "deploy",
    "service",
    "prefers",
    "concise",
    "weekly",
    "monday",
    "customer",
    "invoice",
    "retry",
    "backlog",
    "release",
    "notes",
    "owner",
    "review",
    "meeting",
    "timezone",
    "language",
    "format",
]


def note(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(60)) + f" item{i}\n"


def service_for(url: str | None, work: Path, name: str) -> MemoryService:
    if url:
        engine = make_engine(url)
        conn = engine.connect()
        from mnemofs.store.schema import metadata

        conn.execute(f"TRUNCATE {', '.join(t.name for t in metadata.sorted_tables)} CASCADE")
        conn.commit()
        conn.close()
    else:
        engine = make_engine(f"sqlite:///{work / name}.db")
    return MemoryService(engine, actor="bench")


def bench_creates(service: MemoryService, rounds: int, creates: int) -> None:
    stores = [service.create_store(f"s{i}", owner=f"u{i}").id for i in range(50)]
    pool = service.create_pool("full", 500, on_full="evict-lru")
    service.set_pool(stores, pool.id)
    for n in range(500):
        service.create_memory(stores[n % 50], f"/seed/{n}.md", note(n))
    plain = service.create_store("plain").id
    pooled_rates, plain_rates = [], []
    made = 0
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(creates):
            service.create_memory(stores[made % 50], f"/new/{made}.md", note(made))
            made += 1
        pooled_rates.append(creates / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(creates):
            service.create_memory(plain, f"/new/{made}.md", note(made))
            made += 1
        plain_rates.append(creates / (time.perf_counter() - started))
        service.delete_store(plain)  # room again for the next round
        plain = service.create_store("plain").id
    assert service.get_pool(pool.id).memory_count == 500
    pooled, room = statistics.median(pooled_rates), statistics.median(plain_rates)
    print(f"create in a full evicting pool of 500 over 50 stores: {pooled:8,.0f}/s")
    print(f"create in a store with room:                          {room:8,.0f}/s")
    print(f"ratio pool/plain:                                     {pooled / room:8.2f}")


def bench_search(service: MemoryService) -> None:
    stores = [service.create_store("general").id]
    stores += [service.create_store(f"user{i}", owner=f"u{i}").id for i in range(1, 50)]
    pool = service.create_pool("big", 10_000)
    service.set_pool(stores, pool.id)
    for n in range(10_000):
        service.create_memory(stores[n % 50], f"/notes/{n}.md", note(n))
    service.catch_up_search()
    for label, user in (("whole pool", None), ("as one end user", "u7")):
        times = []
        for query in ("concise status", "weekly report", "item4242", "release notes owner"):
            for _ in range(10):
                started = time.perf_counter()
                service.search_pool(pool.id, query, user=user)
                times.append((time.perf_counter() - started) * 1000)
        times.sort()
        p50, p95 = times[len(times) // 2], times[int(len(times) * 0.95)]
        print(
            f"search over 10,000 memories in 50 stores, {label:15}: p50 {p50:6.1f} ms, "
            f"p95 {p95:6.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", metavar="URL", help="PostgreSQL instead of SQLite (emptied!)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--creates", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mnemofs-bench-pools-"))
    backend = "PostgreSQL" if args.pg else "SQLite"
    print(f"{backend}; medians of {args.rounds} rounds of {args.creates} creates each")
    service = service_for(args.pg, work, "creates")
    bench_creates(service, args.rounds, args.creates)
    service.close()
    service = service_for(args.pg, work, "search")
    bench_search(service)
    service.close()


if __name__ == "__main__":
    main()
