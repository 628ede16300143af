"""The cost of one sync reconcile, for a store of 100 and of 10,000 memories.

    scripts/bench-sync [--repeat 3] [--pg URL]

For each size: a fresh store, its first reconcile (everything comes down), then the time of a
reconcile when nothing changed, and when 1% of the memories changed (half in the store, half
in the local folder) — once as `--once` runs it (every local file is stat'ed) and once as the
long-running worker runs it (inotify names the local files that changed). Prints milliseconds
(median of --repeat) and the ratio 10,000/100: a cost that follows the changes keeps the
nothing-changed ratio near 1, and the 1%-changed ratio near 100 (there are 100x the changes).
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
from mnemofs.sync import SyncWorker

BODY = "a line of an agent's notes about the project\n" * 20  # ~900 bytes


def measure(url: str, size: int, repeat: int, work: Path, watching: bool) -> tuple[float, float]:
    service = MemoryService(make_engine(url), actor="bench")
    store = service.create_store(f"Sync {size}").id
    ids = [
        service.create_memory(store, f"/d{i % 20:02d}/m{i:05d}.md", BODY).id for i in range(size)
    ]
    root = work / f"root-{size}"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    worker = SyncWorker(service, session, root, interval=15)
    worker.reconcile()
    if watching:  # the long-running worker: inotify says which local files changed
        worker.watch_local_changes()
        worker.reconcile()
        worker.reconcile()
    folder = root / session.resources[0].mount_path.rsplit("/", 1)[1]
    idle, changed = [], []
    for step in range(1, repeat + 1):
        start = time.perf_counter()
        worker.reconcile()
        idle.append(time.perf_counter() - start)
        count = max(1, size // 100)
        for i in range(count):
            if i % 2:
                service.update_memory(store, ids[i], content=f"{BODY}remote {step}\n")
            else:
                path = folder / f"d{i % 20:02d}" / f"m{i:05d}.md"
                path.write_text(f"{BODY}local {step}\n")
        start = time.perf_counter()
        report = worker.reconcile()
        changed.append(time.perf_counter() - start)
        assert len(report.uploaded) + len(report.downloaded) == count, report
    service.close()
    return statistics.median(idle) * 1000, statistics.median(changed) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg", help="also measure on this PostgreSQL URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemofs-bench-sync-") as tmp:
        work = Path(tmp)
        targets = [("sqlite", f"sqlite:///{work / 'sync.db'}")]
        if args.pg:
            targets.append(("postgresql", args.pg))
        for name, url in targets:
            for watching in (False, True):
                mode = "watching" if watching else "--once"
                small = measure(url, 100, args.repeat, work / f"{name}-{mode}", watching)
                large = measure(url, 10_000, args.repeat, work / f"{name}-{mode}", watching)
                for label, a, b in (
                    ("nothing changed", small[0], large[0]),
                    ("1% changed", small[1], large[1]),
                ):
                    print(
                        f"{name:<10} {mode:<8} {label:<15}  100: {a:8.1f} ms   "
                        f"10,000: {b:8.1f} ms   ratio {b / a:6.1f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
