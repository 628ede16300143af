"""A soak of real use: one mount under two busy writers, a grep loop, a CLI loop and a sync
worker on a second session of the same store. Samples disk and memory; ends with a verdict.

    scripts/soak [SECONDS] [--postgres] [--remote] [--every 15] [--keep]

What runs, all as separate processes, for SECONDS (default 600):
- a mount of session A; two writers in it create, rewrite (``open(p, "w")``), append
  (``open(p, "a")``), write-temp-then-``os.replace``, rename onto each other and delete over 300
  paths, every byte ASCII;
- ``grep -r`` over the mount in a loop, and a CLI loop creating memories (deleting all but its
  last ``CLI_KEPT``);
- ``mnemofs sync`` of session B (the same store) into a folder, every 2 s.

With ``--remote``, a sandbox's deployment: the mount and the sync worker hold only their
sessions' tokens and reach the database through ``mnemofs serve`` on loopback (the CLI loop
stays an admin's, on the database); the server's RSS and descriptors are sampled and bounded
as the mount's are.

Every ``--every`` seconds it prints the SQLite ``-wal`` size (the largest seen each second), the
database size, the mount daemon's RSS and open descriptors, saves/s and errors by errno. At the
end the writers stop, the sync worker gets SIGTERM (its final reconcile) and the folder is
compared with the store, path by path. The verdict fails on a WAL over 64 MiB at any sample,
daemon RSS (and the server's) growing more than 8 MiB after warm-up (a third of the run, at
most 2 minutes), open descriptors growing, any error other than ENOENT (the writers race each
other's renames and deletes), or any difference between folder and store.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

PATHS = 300
DIRS = 10
WAL_LIMIT = 64 * 1024 * 1024
RSS_GROWTH_LIMIT = 8 * 1024 * 1024
FD_GROWTH_LIMIT = 4
EXPECTED_ERRORS = {"ENOENT"}
# The CLI loop deletes all but its last few memories, from early on: every kind of work has
# begun before the warm-up ends. Its deletes began at its 51st memory (~15 s), and that is when
# a PostgreSQL mount's RSS stepped up once in some short runs (7-9 MiB, with a new thread:
# pyfuse3's notify thread, started by the first invalidation a delete elsewhere needs), which
# the verdict read as growth after its 7 s warm-up.
CLI_KEPT = 5


def mnemofs(db: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "mnemofs", "--db", db, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def spawn(argv: list[str], log: Path, **kwargs: object) -> subprocess.Popen[str]:
    """A process whose stderr goes to ``log``."""
    with open(log, "w") as err:
        return subprocess.Popen(argv, stderr=err, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


# -- the writer process -------------------------------------------------------------------------


def writer(root: Path, seed: int, stats: Path, stop: Path) -> None:
    """Save files in a loop until ``stop`` exists; write counters to ``stats`` every second."""
    rng = random.Random(seed)
    paths = [root / f"d{i % DIRS}" / f"f{i:03d}.md" for i in range(PATHS)]
    saves = 0
    errors: Counter[str] = Counter()
    last = 0.0
    n = 0

    def text(size: int) -> str:
        return "".join(rng.choice("abcdefghij klmnop\n") for _ in range(size))

    while True:
        now = time.monotonic()
        if now - last >= 1.0:
            last = now
            tmp = stats.with_suffix(".tmp")
            tmp.write_text(json.dumps({"saves": saves, "errors": dict(errors)}))
            os.replace(tmp, stats)
            if stop.exists():
                return
        p = rng.choice(paths)
        roll = rng.random()
        n += 1
        try:
            if roll < 0.35:
                with open(p, "w") as f:
                    f.write(text(rng.randrange(50, 1500)))
            elif roll < 0.70:
                with open(p, "a") as f:
                    f.write(f"line {seed} {n}\n")
            elif roll < 0.80:
                tmp_path = p.parent / f".{p.name}.{seed}.tmp"
                with open(tmp_path, "w") as f:
                    f.write(text(rng.randrange(50, 800)))
                os.replace(tmp_path, p)
            elif roll < 0.90:
                os.replace(p, rng.choice(paths))
            else:
                os.unlink(p)
                continue  # a delete is not a save
            saves += 1
        except OSError as exc:
            errors[errno.errorcode.get(exc.errno or 0, str(exc.errno))] += 1


# -- sampling -------------------------------------------------------------------------------------


def size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def rss_and_fds(pid: int) -> tuple[int, int]:
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def mib(n: float) -> str:
    return f"{n / 1024 / 1024:8.1f} MiB"


# -- the end: folder against store --------------------------------------------------------------


def differences(db: str, store: str, folder: Path) -> list[str]:
    from mnemofs.models import Memory
    from mnemofs.store import MemoryService, make_engine

    service = MemoryService(make_engine(db), actor="api")
    try:
        in_store = {
            m.path: service.get_memory(store, m.id, count_access=False).content or ""
            for m in service.list_memories(store)
            if isinstance(m, Memory)
        }
    finally:
        service.close()
    on_disk: dict[str, str] = {}
    for file in folder.rglob("*"):
        if file.is_file():
            on_disk["/" + str(file.relative_to(folder))] = file.read_text()
    out = []
    for path in sorted(set(in_store) | set(on_disk)):
        if path not in on_disk:
            out.append(f"only in the store: {path}")
        elif path not in in_store:
            out.append(f"only in the folder: {path}")
        elif in_store[path] != on_disk[path]:
            out.append(f"content differs: {path}")
    return out


# -- PostgreSQL ----------------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name``."""
    head, _, tail = url.partition("://")
    authority, _, rest = tail.partition("/")
    query = rest.partition("?")[2]
    return f"{head}://{authority}/{name}" + (f"?{query}" if query else "")


def pg_admin_sql(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect("postgresql://" + url.partition("://")[2], autocommit=True) as conn:
        conn.execute(statement)


# -- the server (--remote) -----------------------------------------------------------------------


def serve(me: list[str], log: Path) -> tuple[subprocess.Popen[str], str]:
    """``mnemofs serve`` on a free loopback port, once it answers: the process and its URL."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = spawn([*me, "serve", "--port", str(port)], log, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).close()
            return server, url
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise SystemExit(f"the server did not start:\n{log.read_text()}") from None
            time.sleep(0.05)


# -- the run --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seconds", nargs="?", type=float, default=600.0)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument(
        "--postgres", action="store_true", help="use the PostgreSQL server in $MNEMOFS_TEST_PG_URL"
    )
    parser.add_argument(
        "--remote", action="store_true", help="mount and sync through a server, with tokens"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mnemofs-soak."))
    pg_admin = pg_name = ""
    if args.postgres:
        # A database of its own on the server, dropped at the end: never the suite's.
        pg_admin = os.environ["MNEMOFS_TEST_PG_URL"]
        pg_name = f"mnemofs_soak_{os.getpid()}"
        pg_admin_sql(pg_admin, f"CREATE DATABASE {pg_name}")
        db = with_database(pg_admin, pg_name)
        wal = ""
    else:
        db = str(work / "soak.db")
        wal = db + "-wal"
    mnt, folder, stats_dir = work / "mnt", work / "sync", work / "stats"
    stats_dir.mkdir()
    stop_flag = work / "stop"
    procs: list[subprocess.Popen[str]] = []
    daemon = syncer = server = None
    try:
        store = json.loads(mnemofs(db, "--json", "stores", "create", "soak").stdout)["id"]
        sess_a = json.loads(
            mnemofs(
                db, "--json", "sessions", "create", "--attach", store, "--root", str(mnt)
            ).stdout
        )["id"]
        sess_b = json.loads(
            mnemofs(
                db, "--json", "sessions", "create", "--attach", store, "--root", str(folder)
            ).stdout
        )["id"]
        mnt.mkdir()
        me = [sys.executable, "-m", "mnemofs", "--db", db]
        # Who the mount and the sync worker are: the database and a session, or a server and
        # the session's token (and the environment that carries it).
        as_a: list[str] = [*me, "mount", "--session", sess_a]
        as_b: list[str] = [*me, "sync", "--session", sess_b]
        env_a = env_b = dict(os.environ)
        if args.remote:
            server, url = serve(me, work / "server.log")
            bare = [sys.executable, "-m", "mnemofs"]
            as_a, as_b = [*bare, "mount", "--server", url], [*bare, "sync", "--server", url]
            tokens = (mnemofs(db, "sessions", "token", i).stdout for i in (sess_a, sess_b))
            token_a, token_b = tokens
            env_a = {**os.environ, "MNEMOFS_TOKEN": token_a.strip()}
            env_b = {**os.environ, "MNEMOFS_TOKEN": token_b.strip()}
        daemon = spawn(
            [*as_a, "--root", str(mnt), "--foreground"],
            work / "mount.log",
            stdout=subprocess.PIPE,
            env=env_a,
        )
        assert daemon.stdout is not None
        if not daemon.stdout.readline().startswith("mnemofs: mounted"):
            print((work / "mount.log").read_text(), file=sys.stderr)
            return 2
        root = mnt / "soak"
        for d in range(DIRS):
            (root / f"d{d}").mkdir(exist_ok=True)
        syncer = spawn(
            [
                *as_b,
                "--root",
                str(folder),
                "--interval",
                "2",
                "--foreground",
            ],
            work / "sync.log",
            stdout=subprocess.DEVNULL,
            env=env_b,
        )
        for seed in (1, 2):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--writer",
                        str(root),
                        str(seed),
                        str(stats_dir / f"w{seed}.json"),
                        str(stop_flag),
                    ],
                    text=True,
                )
            )
        grep_loop = f"while [ ! -e {stop_flag} ]; do grep -r -c line {root} >/dev/null; done"
        procs.append(spawn(["bash", "-c", grep_loop], Path(os.devnull)))
        cli = f"{sys.executable} -m mnemofs --db '{db}' memories"
        cli_loop = (
            f"n=0; while [ ! -e {stop_flag} ]; do "
            f"echo note $n | {cli} create {store} /cli/n$n.md >/dev/null; "
            f"[ $n -ge {CLI_KEPT} ] && {cli} delete {store} /cli/n$((n-{CLI_KEPT})).md >/dev/null; "
            "n=$((n+1)); done"
        )
        procs.append(spawn(["bash", "-c", cli_loop], work / "cli.log"))

        through = f" through a server (pid {server.pid})" if server is not None else ""
        print(
            f"soak: {args.seconds:.0f} s on {'PostgreSQL' if args.postgres else 'SQLite'}"
            f"{through}; mount pid {daemon.pid}; work dir {work}"
        )
        served = f"{'server RSS':>12}  {'fds':>4}  " if server is not None else ""
        print(
            f"{'t':>5}  {'WAL (max)':>12}  {'database':>12}  {'mount RSS':>12}  {'fds':>4}  "
            f"{served}{'saves/s':>8}  errors"
        )
        # (t, WAL max, then RSS and descriptors of each process watched: the mount's, the server's)
        samples: list[tuple[float, int, list[tuple[int, int]]]] = []
        watched = [("mount", daemon)] + ([("server", server)] if server is not None else [])
        start = time.monotonic()
        wal_max = wal_max_all = 0
        last_saves, last_t = 0, start
        next_sample = start + args.every
        errors: Counter[str] = Counter()
        while True:
            time.sleep(1.0)
            now = time.monotonic()
            if wal:
                wal_max = max(wal_max, size_of(wal))
            if now < next_sample and now - start < args.seconds:
                continue
            usage = [rss_and_fds(p.pid) for _, p in watched]
            saves, errors = 0, Counter()
            for f in stats_dir.glob("*.json"):
                with open(f) as fh:
                    s = json.load(fh)
                saves += s["saves"]
                errors.update(s["errors"])
            rate = (saves - last_saves) / (now - last_t)
            last_saves, last_t = saves, now
            t = now - start
            samples.append((t, wal_max, usage))
            wal_max_all = max(wal_max_all, wal_max)
            db_size = size_of(db) if wal else 0
            shown = ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none"
            used = "".join(f"{mib(rss)}  {fds:4d}  " for rss, fds in usage)
            print(
                f"{t:5.0f}  {mib(wal_max) if wal else '         n/a':>12}  "
                f"{mib(db_size) if wal else '         n/a':>12}  {used}{rate:8.0f}  {shown}",
                flush=True,
            )
            wal_max = 0
            next_sample += args.every
            if t >= args.seconds:
                break

        stop_flag.touch()
        for p in procs:
            p.wait(timeout=60)
        procs.clear()
        time.sleep(3.0)  # the last saves reach the store; the worker's next pass sees them
        syncer.send_signal(signal.SIGTERM)
        sync_rc = syncer.wait(timeout=120)
        syncer = None
        diffs = differences(db, store, folder / "soak")

        verdict = []
        if wal and wal_max_all >= WAL_LIMIT:
            verdict.append(f"the WAL reached {mib(wal_max_all).strip()} (limit 64 MiB)")
        warm = [s for s in samples if s[0] >= min(120.0, args.seconds / 3)]
        for i, (name, _) in enumerate(watched if len(warm) >= 2 else []):
            growth = warm[-1][2][i][0] - min(s[2][i][0] for s in warm[:2])
            if growth > RSS_GROWTH_LIMIT:
                verdict.append(f"{name} RSS grew {mib(growth).strip()} after warm-up")
            fd_growth = warm[-1][2][i][1] - warm[0][2][i][1]
            if fd_growth > FD_GROWTH_LIMIT:
                verdict.append(f"the {name}'s open descriptors grew by {fd_growth}")
        unexpected = {k: v for k, v in errors.items() if k not in EXPECTED_ERRORS}
        if unexpected:
            verdict.append(f"unexpected errors: {unexpected}")
        if sync_rc != 0:
            verdict.append(f"the sync worker exited {sync_rc}")
        print(f"folder vs store at the end: {len(diffs)} difference(s)")
        for line in diffs[:20]:
            print("  " + line)
        if diffs:
            verdict.append(f"{len(diffs)} path(s) differ between folder and store")
        print("verdict: " + ("PASS" if not verdict else "FAIL: " + "; ".join(verdict)))
        return 0 if not verdict else 1
    finally:
        stop_flag.touch()
        for p in procs:
            p.kill()
        if syncer is not None:
            syncer.kill()
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, check=False)
        if server is not None:  # after its clients
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if pg_name:
            pg_admin_sql(pg_admin, f"DROP DATABASE IF EXISTS {pg_name} WITH (FORCE)")
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--writer":
        writer(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
    else:
        sys.exit(main())
