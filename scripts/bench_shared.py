"""Shared stores, measured (run through scripts/bench-shared, which sets up PostgreSQL).

For each backend (a fresh SQLite file; the PostgreSQL database at --pg, emptied first):

- visibility: a file saved through mount A is read back through mount B until B shows the new
  content; the time from A's close() returning to B's first read of it. Two cases: a file B has
  read before (kernel caches must be invalidated) and a new file. Samples are 0-100 ms apart
  at random (a mount looks at most every 50 ms; saves in step with that would measure only
  the step). Median and 99th percentile.
- throughput: 1, 2 and 4 mounts of one store, one sequential writer each saving 4 KiB files
  for --seconds; saves/s in all and the ratio to one mount. The files hold `x` bytes, unless
  ``--prose`` gives every save its own made-up text (scripts/bench.py's ``Texts``), which the
  secrets screen, the store and the search index (catching up every 2 s while writes go on)
  all see as text.
- idle CPU: a mount with nothing happening, for --idle seconds; percent of one core (its own
  process, from /proc).
- saves racing the search index: 600 memories of 4 KiB of prose, all changed, then one service
  catches the index up while another saves every third of them, in the same order; how long
  those saves take (median, 99th percentile, longest). The catch-up holds what it takes in a
  batch while it indexes it (issue 17).

Every mount is a real daemon (``mnemofs mount --foreground``), ended by its PID and unmounted
with ``fusermount3 -u -z`` whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Texts

from mnemofs.store import MemoryService, make_engine

TICKS = os.sysconf("SC_CLK_TCK")

WRITER = """
import os, sys, time
folder, seconds, prose = sys.argv[1], float(sys.argv[2]), sys.argv[3]
text = open(prose, "rb").read() if prose else b""
data = b"x" * 4096
stop, n = time.monotonic() + seconds, 0
while time.monotonic() < stop:
    if text:
        # its own windows for each writer (folders end in -0, -1...): no two saves alike
        start = (n * 193 + ord(folder[-1]) * 65537) % (len(text) - 4096)
        data = text[start : start + 4095] + b"\\n"
    with open(os.path.join(folder, f"f{n % 100}.md"), "wb") as f:
        f.write(data + str(n).encode())
    n += 1
print(n)
"""


@contextlib.contextmanager
def mount(url: str, session_id: str, root: Path) -> Iterator[subprocess.Popen[str]]:
    root.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "mnemofs",
        "--db",
        url,
        "mount",
        "--session",
        session_id,
        "--root",
        str(root),
        "--foreground",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("mnemofs: mounted"):
            raise SystemExit(f"mount at {root} did not start: {line!r}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(root)], capture_output=True, check=False)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def visibility(a: Path, b: Path, samples: int, new_files: bool) -> list[float]:
    times = []
    rng = random.Random(7)
    for i in range(samples):
        time.sleep(rng.uniform(0, 0.1))  # a save at a random moment, not in step with the last
        name = f"new-{i}.md" if new_files else "seen.md"
        text = f"sample {i}\n"
        if not new_files:
            (b / name).read_text()  # B has it in its caches
        with open(a / name, "w") as f:
            f.write(text)
        saved = time.perf_counter()
        deadline = saved + 5.0
        while True:
            try:
                if (b / name).read_text() == text:
                    break
            except FileNotFoundError:
                pass
            if time.perf_counter() > deadline:
                raise SystemExit(f"{name}: not visible in the other mount after 5 s")
            time.sleep(0.0005)
        times.append((time.perf_counter() - saved) * 1000)
    return times


PROSE = ("Notes on the deploy: restart the worker, then check the queue depth and logs.\n" * 60)[
    :4096
]


def racing_the_index(url: str, store: str) -> list[float]:
    """Save times (ms) of saves made while another service catches the search index up."""
    saver = MemoryService(make_engine(url), actor="saver")
    indexer = MemoryService(make_engine(url), actor="indexer")
    for service in (saver, indexer):
        service.defer_checkpoints()  # as mounts: no trailer thread catching up on its own
    ids = [saver.create_memory(store, f"/race/{i:03d}.md", PROSE).id for i in range(600)]
    indexer.catch_up_search()
    times = []
    for round_no in range(3):
        for memory_id in ids:
            saver.update_memory(store, memory_id, content=f"{PROSE}{round_no}\n")
        catching_up = threading.Thread(target=indexer.catch_up_search)
        catching_up.start()
        for memory_id in ids[::3]:
            start = time.perf_counter()
            saver.update_memory(store, memory_id, content=f"{PROSE}{round_no} again\n")
            times.append((time.perf_counter() - start) * 1000)
        catching_up.join()
        indexer.checkpoint(force=True)  # a SQLite WAL kept small between rounds
    saver.close()
    indexer.close()
    return times


def run_backend(name: str, url: str, work: Path, args: argparse.Namespace) -> list[str]:
    service = MemoryService(make_engine(url), actor="bench")
    store = service.create_store(f"Bench {name}").id
    service.create_memory(store, "/seen.md", "first\n")
    roots = [work / f"{name}-m{i}" for i in range(4)]
    sessions = [
        service.create_session([{"memory_store_id": store}], mount_root=str(r)).id for r in roots
    ]
    slug = "bench-" + ("sqlite" if name == "sqlite" else "postgresql")
    prose = ""
    if args.prose:
        prose = str(work / "prose.txt")
        Path(prose).write_bytes(Texts(True).text)
    lines = []
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(mount(url, s, r)) for s, r in zip(sessions, roots, strict=True)
        ]
        folders = [r / slug for r in roots]
        for label, new in (("changed file", False), ("new file", True)):
            t = visibility(folders[0], folders[1], args.samples, new)
            median, p99 = statistics.median(t), percentile(t, 0.99)
            lines.append(
                f"{name:<10} visible in another mount, {label:<12}  "
                f"median {median:7.1f} ms   p99 {p99:7.1f} ms"
            )
        base = 0.0
        for count in (1, 2, 4):
            for i in range(count):
                (folders[i] / f"w{count}-{i}").mkdir()
            writers = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        WRITER,
                        str(folders[i] / f"w{count}-{i}"),
                        str(args.seconds),
                        prose,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(count)
            ]
            saves = sum(int(w.communicate()[0]) for w in writers)
            rate = saves / args.seconds
            base = base or rate
            lines.append(
                f"{name:<10} saves/s with {count} mount(s) writing   {rate:9.0f}   "
                f"ratio to 1: {rate / base:.2f}"
            )
        time.sleep(1.0)  # let the last changes settle everywhere
        before = cpu_seconds(procs[0].pid)
        time.sleep(args.idle)
        idle = (cpu_seconds(procs[0].pid) - before) / args.idle * 100
        lines.append(
            f"{name:<10} idle CPU of a mount over {args.idle:.0f} s        {idle:7.2f} % of a core"
        )
    t = racing_the_index(url, store)
    lines.append(
        f"{name:<10} saves racing the search index  median {statistics.median(t):6.2f} ms   "
        f"p99 {percentile(t, 0.99):6.2f} ms   longest {max(t):6.1f} ms"
    )
    service.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="visibility samples per case")
    parser.add_argument("--seconds", type=float, default=5.0, help="each throughput run")
    parser.add_argument("--idle", type=float, default=10.0, help="idle CPU window")
    parser.add_argument("--pg", help="a PostgreSQL URL (its tables are emptied)")
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--prose", action="store_true", help="writers save made-up text")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemofs-bench-shared-") as tmp:
        work = Path(tmp)
        backends = [("sqlite", f"sqlite:///{work / 'mnemofs.db'}")]
        if args.pg and not args.sqlite_only:
            engine = make_engine(args.pg)
            from mnemofs.store.schema import metadata

            conn = engine.connect()
            names = ", ".join(t.name for t in metadata.sorted_tables)
            conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
            conn.commit()
            conn.close()
            backends.append(("postgresql", args.pg))
        for name, url in backends:
            for line in run_backend(name, url, work, args):
                print(line, flush=True)


if __name__ == "__main__":
    main()
