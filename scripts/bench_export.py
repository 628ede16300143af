"""Export and import speed and memory: versions per second and peak RSS, for a store of 1,000
memories (10,000 versions) and one of 10,000 memories (100,000 versions).

    scripts/bench-export [--dir DIR] [--pg URL] [--repeat 1]

Each size starts from a generated export file (10 versions per memory: a create and nine
edits of ~1 KiB notes, in 20 directories). The timed steps are the real commands, each in a
process of its own whose peak RSS is read at its end: `mnemofs stores import FILE` into an
empty database, then `mnemofs stores export STORE --out FILE` of what was imported (plain
and gzip). Aims (issue 18): >= 5,000 versions/s both ways, RSS flat in the store's size (the
large store's peak RSS over the small one's near 1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1_000, 10_000)
VERSIONS_PER_MEMORY = 10
DIRS = 20
SRC = str(Path(__file__).resolve().parent.parent / "src")

# Runs one CLI command in this process and prints its peak RSS (KiB) last.
_MEASURED = """
import sys
sys.path.insert(0, {src!r})
from mnemofs.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    if exc.code not in (0, None):
        raise
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over execve from the parent.
with open("/proc/self/status") as status:
    print(next(l.split()[1] for l in status if l.startswith("VmHWM:")), file=sys.stderr)
"""


def ulid(n: int, salt: int) -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    value = (1_700_000_000_000 + n) << 80 | (salt * 1_000_003 + n)
    return "".join(alphabet[(value >> s) & 31] for s in range(125, -1, -5))


def stamp(n: int) -> str:
    seconds = 1_700_000_000 + n
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".000Z"


def write_file(path: Path, memories: int) -> int:
    """A valid export of a store with ``memories`` memories, VERSIONS_PER_MEMORY each."""
    line = lambda obj: json.dumps(obj, separators=(",", ":")) + "\n"  # noqa: E731
    versions = 0
    heads: list[dict[str, object]] = []
    with path.open("w") as out:
        out.write(
            line(
                {
                    "format": "mnemofs-store-export",
                    "version": 1,
                    "exported_at": stamp(0),
                    "heads_only": False,
                    "mnemofs": "bench",
                }
            )
        )
        out.write(
            line(
                {
                    "record": "store",
                    "id": "memstore_" + ulid(0, 1),
                    "name": "bench",
                    "description": "",
                    "metadata": {},
                    "kind": "memory",
                    "owner": "",
                    "on_full": "refuse",
                    "secrets": "refuse",
                    "created_at": stamp(0),
                    "updated_at": stamp(0),
                    "archived_at": None,
                }
            )
        )
        for round_ in range(VERSIONS_PER_MEMORY):
            for m in range(memories):
                text = f"# note {m}\n" + f"revision {round_} of a note about item {m}. " * 20
                data = text.encode()
                n = round_ * memories + m
                version = {
                    "record": "version",
                    "id": "memver_" + ulid(n, 2),
                    "memory_id": "mem_" + ulid(m, 3),
                    "operation": "created" if round_ == 0 else "modified",
                    "path": f"/d{m % DIRS}/note-{m}.md",
                    "content": text,
                    "content_sha256": hashlib.sha256(data).hexdigest(),
                    "size_bytes": len(data),
                    "created_at": stamp(n),
                    "actor": "bench",
                    "redacted_at": None,
                    "redacted_by": None,
                    "folded_id": None,
                }
                out.write(line(version))
                versions += 1
                if round_ == VERSIONS_PER_MEMORY - 1:
                    heads.append(version)
        for v in sorted(heads, key=lambda v: str(v["memory_id"])):
            out.write(
                line(
                    {
                        "record": "memory",
                        "id": v["memory_id"],
                        "path": v["path"],
                        "content_sha256": v["content_sha256"],
                        "size_bytes": v["size_bytes"],
                        "created_at": stamp(0),
                        "updated_at": v["created_at"],
                        "accessed_at": None,
                        "head_version_id": v["id"],
                    }
                )
            )
        out.write(
            line({"record": "end", "directories": 0, "versions": versions, "memories": memories})
        )
    return versions


def measured(db: str, *args: str) -> tuple[float, int, str]:
    """Seconds, peak RSS (MiB) and standard output of one command."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED.format(src=SRC), "--db", db, "--json", *args],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mnemofs {' '.join(args)} failed:\n{done.stderr}")
    rss_kib = int(done.stderr.strip().splitlines()[-1])
    return elapsed, rss_kib // 1024, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="where the databases and files go (default: a temp dir)")
    parser.add_argument("--pg", metavar="URL", help="import into and export from PostgreSQL")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mnemofs-bench-export-", dir=args.dir))
    rows = []
    for size in SIZES:
        source = work / f"store-{size}.jsonl"
        versions = write_file(source, size)
        results: dict[str, list[tuple[float, int]]] = {"import": [], "export": [], "export .gz": []}
        for attempt in range(args.repeat):
            db = args.pg or str(work / f"db-{size}-{attempt}.sqlite")
            if args.pg:
                _empty_pg(args.pg)
            seconds, rss, out = measured(db, "stores", "import", str(source))
            store = json.loads(out)["id"]
            results["import"].append((seconds, rss))
            for step, suffix in (("export", ".jsonl"), ("export .gz", ".jsonl.gz")):
                target = work / f"out-{size}{suffix}"
                seconds, rss, _ = measured(db, "stores", "export", store, "--out", str(target))
                results[step].append((seconds, rss))
        for step, runs in results.items():
            seconds = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            rows.append((size, versions, step, versions / seconds, rss))
    print(f"{'memories':>9} {'versions':>9}  {'step':<11} {'versions/s':>11} {'peak RSS':>9}")
    for size, versions, step, rate, rss in rows:
        print(f"{size:>9,} {versions:>9,}  {step:<11} {rate:>11,.0f} {rss:>6} MiB")
    print("\nRSS, large store over small (aim: near 1):")
    for step in ("import", "export", "export .gz"):
        small, large = (r[4] for r in rows if r[2] == step)
        print(f"  {step:<11} {large / small:.2f}")
    print(f"\nfiles and databases in {work}" + ("" if args.dir else " (temporary)"))


def _empty_pg(url: str) -> None:
    sys.path.insert(0, SRC)
    from mnemofs.store import make_engine
    from mnemofs.store.schema import metadata

    engine = make_engine(url)
    conn = engine.connect()
    names = ", ".join(t.name for t in metadata.sorted_tables)
    conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    conn.commit()
    conn.close()


if __name__ == "__main__":
    os.umask(0o077)
    main()
