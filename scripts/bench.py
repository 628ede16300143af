"""Small-file workload on mnemofs mounts, side by side with bindfs and rclone mounts.

    scripts/bench [--files 2000] [--repeat 3] [--store-size 10000] [--pg [URL]] [--remote]
                  [--against REV] [--only NAMES] [--each] [--prose]

One sequential client runs the same phases, round after round, on each target in turn phase by
phase (so the targets compared in a ratio ran seconds apart and the machine's noise hits them
alike; the order rotates each round), on:

- bindfs: a C FUSE passthrough (what a FUSE request costs with no database behind it);
- rclone: ``rclone mount --vfs-cache-mode writes`` of a local folder (what many agent sandboxes
  mount today);
- mnemofs: a mount of a store in a fresh SQLite database;
- store: no mount, the store's own calls for the phases a mount answers with one (mkdir,
  create, overwrite, append, rename, delete, rmdir), made in this process on a database of
  its own, as a mount's request thread makes them (``StoreCalls``); with ``--pg`` also
  store-pg on PostgreSQL;
- with ``--store-size N``: mnemofs-full, a mount (of its own database) that already holds N
  memories: in the benchmarked store as many as leave room for the workload's files under the
  per-store limit (it ends each round full), the rest in a second attached store; and how long
  that mount took to be ready;
- with ``--pg``: mnemofs-pg, the same mount on PostgreSQL (``--pg URL``, else
  $MNEMOFS_TEST_PG_URL; scripts/bench starts a throwaway cluster when neither is given);
- with ``--remote``: a mount holding only a session token, through ``mnemofs serve`` on loopback,
  and how long a save through one remote mount takes to show in another;
- with ``--against REV``: baseline, the same mount as mnemofs run from the code of git revision
  REV (its ``src/``, exported into the work folder): a change measured against what it
  changes, side by side in one run (mnemofs/baseline); with ``--pg`` too, baseline-pg, the
  same on PostgreSQL (pg/baseline-pg).

Everything (sources, caches, databases) lives in a folder on tmpfs (``--dir``, default
/dev/shm). Phases: mkdir, create+write+close of 4 KiB files in 20 directories, stat, list,
read, overwrite 2 KiB, append a line, ``sed -i``, temp file + ``os.replace``, ``sh -c 'echo >>
f'``, rename, delete, rmdir. Prints ops/s (median of --repeat rounds), the ratios mnemofs/bindfs
and mnemofs/rclone (and full/mnemofs, pg/mnemofs, remote/mnemofs, mnemofs/baseline,
mnemofs/store when measured), each the median of the rounds' own ratios; then where a change's
time goes: per call, the mount's, its store call's and the rest (FUSE, the kernel, the client),
and the best ratio to bindfs and rclone that store call allows if the rest cost what bindfs's
whole call does (``floors``); then issue 17's aims, each with its rounds' range and how many
rounds met it (scripts/bench_aims.py); then per mnemofs mount the largest SQLite ``-wal`` seen
during the rounds, resident memory after them, and CPU used while idle. ``--each`` also prints
every round's ops/s of every target. Files hold the same ``x`` bytes unless ``--prose`` gives each
its own made-up text (``Texts``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIRS = 20
BLOCK = b"x" * 4096
HALF = b"y" * 2048
PROSE_SEED = 17
LINE = b"appended line\n"
SETTLE_S = 2.0
# Between one target's phase and the next's: at least PHASE_SETTLE_S, then until the bench's
# processes stop working in the background (a checkpoint, the search index's catch-up once a
# burst of saves ends, rclone's uploads), at most PHASE_SETTLE_MAX_S: each phase pays for its own
# work, not for what the phase before it (another target's) left running.
PHASE_SETTLE_S = 0.5
PHASE_SETTLE_MAX_S = 5.0
QUIET_CPU_S = 0.002  # CPU time of all of them together in QUIET_WINDOW_S: quiet
QUIET_WINDOW_S = 0.05
IDLE_S = 10.0


@dataclass
class Target:
    name: str
    path: Path
    pid: int | None = None  # a mnemofs daemon: its memory and idle CPU are reported
    db: Path | None = None  # its SQLite file: the -wal beside it is watched
    runs: list[dict[str, float]] = field(default_factory=list)
    wal_max: int = 0
    errors: list[str] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)  # failed calls, by phase

    def workload(self, round_no: int, files: int, texts: Texts) -> list[Phase]:
        return workload(self.path / f"round{round_no + 1}", files, self, texts)


Phase = tuple[str, Callable[[], float]]


class Texts:
    """What a phase writes to the file at ``index``: 4 KiB (``block``: a create, a replace)
    or 2 KiB over its start (``half``: an overwrite). By default the same ``x`` (``y``) bytes
    in every file, which the secrets screen and the search index see as one word and the
    store keeps once; with ``prose``, a window of a long text of made-up lowercase words,
    different for every file, as agents' notes are."""

    def __init__(self, prose: bool) -> None:
        self.prose = prose
        self.text = b""
        if prose:
            rng = random.Random(PROSE_SEED)
            vowels, consonants = "aeiou", "bcdfghjklmnprstvwz"
            vocab = [
                "".join(rng.choice(vowels if k % 2 else consonants) for k in range(n))
                for n in (rng.randint(2, 9) for _ in range(3000))
            ]
            lines = (" ".join(rng.choices(vocab, k=12)) for _ in range(6000))
            self.text = "\n".join(lines).encode()

    def _window(self, index: int, size: int, stride: int) -> bytes:
        start = (index * stride) % (len(self.text) - size)
        return self.text[start : start + size - 1] + b"\n"

    def block(self, index: int) -> bytes:
        return self._window(index, 4096, 193) if self.prose else BLOCK

    def half(self, index: int) -> bytes:
        return self._window(index, 2048, 389) if self.prose else HALF


def layout(files: int) -> tuple[list[str], list[str], list[str]]:
    """A round's folders, the folders made in them (mkdir's and rmdir's phases) and its
    files, relative to the round's folder."""
    dirs = [f"d{i:02d}" for i in range(DIRS)]
    extra = [f"{dirs[i % DIRS]}/sub{i:04d}" for i in range(max(DIRS, files // 10))]
    paths = [f"{dirs[i % DIRS]}/f{i:05d}.md" for i in range(files)]
    return dirs, extra, paths


def workload(root: Path, files: int, target: Target, texts: Texts) -> list[Phase]:
    """One round in ``root`` (a new folder each round: a peer that failed a round leaves what
    it failed on behind): its phases in order, each a name and a function that runs it and
    returns ops/s, of the calls that succeeded. A call that fails is noted in the target's
    ``errors`` and ``failed`` and the phase goes on: rclone's write-back can finish uploading
    a file after it was renamed, and the folder's rmdir then fails with EIO ("directory not
    empty" in its log), at once: counted, it would make the peer look faster."""
    dirs, extra, paths = ([root / name for name in names] for names in layout(files))
    index = {p: i for i, p in enumerate(paths)}
    fifth = paths[: max(1, files // 5)]

    def phase(name: str, fn: Callable[[Path], object], items: list[Path] = paths) -> Phase:
        def run() -> float:
            root.mkdir(exist_ok=True)  # the round's folder, made untimed
            done = len(items)
            start = time.perf_counter()
            for p in items:
                try:
                    fn(p)
                except (OSError, subprocess.CalledProcessError) as exc:
                    target.errors.append(f"{name} {p.relative_to(root)}: {exc}")
                    target.failed[name] += 1
                    done -= 1
            return done / (time.perf_counter() - start)

        return name, run

    def create(p: Path) -> None:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, texts.block(index[p]))
        os.close(fd)

    def listing() -> float:
        start = time.perf_counter()
        listed = sum(len(os.listdir(d)) for d in dirs)
        return listed / (time.perf_counter() - start)

    def read(p: Path) -> None:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 8192)
        os.close(fd)

    def overwrite(p: Path) -> None:
        fd = os.open(p, os.O_WRONLY)
        os.pwrite(fd, texts.half(index[p]), 0)
        os.close(fd)

    def append(p: Path) -> None:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, LINE)
        os.close(fd)

    def sed(p: Path) -> None:
        # stderr: sed reports rclone's EIO for its ACL xattr (the edit itself succeeds)
        subprocess.run(
            ["sed", "-i", "s/appended/edited/", p], check=True, stderr=subprocess.DEVNULL
        )

    def replace(p: Path) -> None:
        tmp = p.with_name(f".{p.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(texts.block(index[p] + files))
        os.replace(tmp, p)

    def shell_append(p: Path) -> None:
        subprocess.run(["sh", "-c", 'echo "a shell line" >> "$0"', str(p)], check=True)

    return [
        phase("mkdir", Path.mkdir, dirs + extra),
        phase("create+write+close", create),
        phase("stat", os.stat),
        ("list (entries)", listing),
        phase("read", read),
        phase("overwrite 2 KiB", overwrite),
        phase("append a line", append),
        phase("sed -i", sed, fifth),
        phase("temp + os.replace", replace, fifth),
        phase("sh -c 'echo >> f'", shell_append, fifth),
        phase("rename", lambda p: os.rename(p, p.with_suffix(".txt"))),
        phase("delete", lambda p: os.unlink(p.with_suffix(".txt"))),
        phase("rmdir", Path.rmdir, extra + dirs),
    ]


@dataclass
class StoreCalls(Target):
    """The store's own calls for the phases a mount answers with one (mkdir, create,
    overwrite, append, rename, delete, rmdir), made in this process as a mount's request
    thread makes them (``defer_checkpoints``; the upkeep on a thread of its own): what a
    mount's change costs before FUSE, the kernel and the client add theirs. The other phases
    are not one store call: ``nan``."""

    service: Any = None
    store_id: str = ""

    def workload(self, round_no: int, files: int, texts: Texts) -> list[Phase]:
        from mnemofs.content import Content

        service, store = self.service, self.store_id
        root = f"/round{round_no + 1}"
        dirs, extra, paths = ([f"{root}/{name}" for name in names] for names in layout(files))
        saved: dict[str, tuple[str, bytes]] = {}  # path: (memory id, content)

        def phase(name: str, fn: Callable[[int, str], object], items: list[str]) -> Phase:
            def run() -> float:
                start = time.perf_counter()
                for i, path in enumerate(items):
                    fn(i, path)
                return len(items) / (time.perf_counter() - start)

            return name, run

        def save(path: str, data: bytes, memory_id: str | None) -> None:
            memory, _ = service.save_file(
                store, path, Content.from_bytes(data), memory_id=memory_id, actor=self.name
            )
            saved[path] = (memory.id, data)

        def overwrite(i: int, path: str) -> None:
            memory_id, data = saved[path]
            save(path, texts.half(i) + data[len(texts.half(i)) :], memory_id)

        def append(i: int, path: str) -> None:
            memory_id, data = saved[path]
            save(path, data + LINE, memory_id)

        def rename(i: int, path: str) -> None:
            memory_id, _ = saved[path]
            new = path.removesuffix(".md") + ".txt"
            service.update_memory(store, memory_id, path=new, actor=self.name, keep_directory=True)

        def delete(i: int, path: str) -> None:
            memory_id, _ = saved.pop(path)
            service.delete_memory(store, memory_id, actor=self.name, keep_directory=True)

        def not_one_call() -> float:
            return math.nan

        # A mount's phases, in its order: ``run_round`` pairs the targets' phases by position.
        mount_phases = [name for name, _ in workload(Path(root), files, self, texts)]
        phases = dict(
            [
                phase("mkdir", lambda i, p: service.make_directory(store, p), dirs + extra),
                phase("create+write+close", lambda i, p: save(p, texts.block(i), None), paths),
                phase("overwrite 2 KiB", overwrite, paths),
                phase("append a line", append, paths),
                phase("rename", rename, paths),
                phase("delete", delete, paths),
                phase("rmdir", lambda i, p: service.remove_directory(store, p), extra + dirs),
            ]
        )
        return [(name, phases.get(name, not_one_call)) for name in mount_phases]


def upkeep(service: Any, stop: threading.Event) -> None:
    """What a mount's worker thread does for its request thread (fs/mount.py's
    ``_checkpoint``): checkpoints, the search index's catch-up, once due."""
    while not stop.is_set():
        wait = service.upkeep_in()
        if wait is not None and wait <= 0:
            service.checkpoint()
        else:
            stop.wait(0.1 if wait is None else min(wait, 0.1))


def settle(pids: list[int]) -> None:
    """Wait until the processes ``pids`` and this machine's PostgreSQL server processes are
    quiet (see ``PHASE_SETTLE_S``). The server's count: a PostgreSQL mount's search catch-up
    after a burst runs in its backend while the mount itself only waits for the answer."""
    time.sleep(PHASE_SETTLE_S)
    deadline = time.monotonic() + PHASE_SETTLE_MAX_S
    before = busy_s(pids)
    while time.monotonic() < deadline:
        time.sleep(QUIET_WINDOW_S)
        now = busy_s(pids)
        if now - before < QUIET_CPU_S:
            return
        before = now


def busy_s(pids: list[int]) -> float:
    """CPU seconds of ``pids`` and of every process named ``postgres``, together (a backend
    that ended meanwhile drops out: it only makes a window look quieter once)."""
    total = 0.0
    for pid in {*pids, *server_pids()}:
        with contextlib.suppress(OSError):
            total += cpu_s(pid)
    return total


def server_pids() -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(entry.path, "comm").read_text().strip() == "postgres":
                    found.append(int(entry.name))
    return found


def run_round(
    targets: list[Target], round_no: int, files: int, pids: list[int], texts: Texts
) -> None:
    """One round: each phase on every target in turn, a moment apart (``settle``), so a
    target's ratio to another compares runs made seconds apart (this machine's speed drifts by
    tens of per cent within a minute); the targets' order rotates from round to round."""
    turn = round_no % len(targets)
    order = targets[turn:] + targets[:turn]
    plans = {t.name: t.workload(round_no, files, texts) for t in order}
    results: dict[str, dict[str, float]] = {t.name: {} for t in order}
    for step in range(len(plans[order[0].name])):
        for t in order:
            name, run = plans[t.name][step]
            results[t.name][name] = run()
            settle(pids)
    for t in targets:
        t.runs.append(results[t.name])


def wait_mounted(path: Path, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if os.path.ismount(path):
            return time.monotonic() - start
        time.sleep(0.01)
    raise SystemExit(f"{path} did not get mounted")


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[subprocess.Popen[bytes]] = []
        self.mounts: list[Path] = []
        self.stop_upkeep = threading.Event()

    def start(self, argv: list[str], mountpoint: Path, **kw: object) -> subprocess.Popen[bytes]:
        mountpoint.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
        self.procs.insert(0, proc)  # stopped in the reverse order of starting
        self.mounts.append(mountpoint)
        return proc

    def close(self) -> None:
        self.stop_upkeep.set()
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for path in self.mounts:
            subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)

    def standard(self, want: Callable[[str], bool], against: str | None) -> list[Target]:
        """The targets every benchmark mounts (those ``want`` takes): bindfs, rclone, a mnemofs
        mount of a fresh SQLite database and, with ``against``, that mount on that revision."""
        targets = []
        if want("bindfs") and shutil.which("bindfs"):
            targets.append(self.bindfs())
        if want("rclone") and shutil.which("rclone"):
            targets.append(self.rclone())
        if want("mnemofs"):
            targets.append(self.mnemofs("mnemofs", self.database("mnemofs"))[0])
        if against and want("baseline"):
            code = self.code_of(against)
            targets.append(self.mnemofs("baseline", self.database("baseline"), code=code)[0])
        return targets

    # -- peers ----------------------------------------------------------------------------------

    def bindfs(self) -> Target:
        src, bound = self.work / "bindfs-src", self.work / "bindfs"
        src.mkdir()
        bound.mkdir()
        subprocess.run(["bindfs", src, bound], check=True)
        self.mounts.append(bound)
        return Target("bindfs", bound)

    def rclone(self) -> Target:
        src, mnt = self.work / "rclone-src", self.work / "rclone"
        src.mkdir()
        self.start(
            [
                "rclone",
                "mount",
                str(src),
                str(mnt),
                "--vfs-cache-mode",
                "writes",
                "--cache-dir",
                str(self.work / "rclone-cache"),
            ],
            mnt,
            env={**os.environ, "RCLONE_CONFIG": str(self.work / "rclone.conf")},
            stderr=subprocess.DEVNULL,
        )
        wait_mounted(mnt)
        return Target("rclone", mnt)

    def mnemofs(
        self, name: str, db: str, prefill: int = 0, room: int = 0, *, code: Path | None = None
    ) -> tuple[Target, float]:
        """A mount of store "Bench" in database ``db`` (a path or a URL), with ``prefill``
        memories already stored (see ``fill``); also how long the mount took to be ready.
        ``code``: a folder holding another ``mnemofs`` package to run instead of this one."""
        import json

        cli = [sys.executable, "-m", "mnemofs", "--db", db]
        env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
        made = subprocess.run(
            [*cli, "--json", "stores", "create", "Bench"], check=True, capture_output=True, env=env
        )
        # By id: a server database keeps the "Bench" stores of earlier runs.
        bench_id = json.loads(made.stdout)["id"]
        attach = fill(db, bench_id, prefill, room) if prefill else [bench_id]
        root = self.work / name
        argv = [*cli, "mount", "--root", str(root), "--foreground"]
        for store in attach:
            argv += ["--attach", store]
        proc = self.start(argv, root, env=env)
        ready = wait_mounted(root)
        os.listdir(root / "bench")
        path = Path(db) if "://" not in db else None
        return Target(name, root / "bench", pid=proc.pid, db=path), ready

    def store_calls(self, name: str, db: str) -> StoreCalls:
        """A store "Bench" in database ``db`` (a path or a URL) and a service of this process
        to call it, set up as a mount sets up its own (``StoreCalls``)."""
        from mnemofs.store import MemoryService, make_engine

        service = MemoryService(make_engine(db))
        service.defer_checkpoints()  # on this thread: the one that makes the calls
        threading.Thread(target=upkeep, args=(service, self.stop_upkeep), daemon=True).start()
        store = service.create_store("Bench").id
        path = Path(db) if "://" not in db else None
        return StoreCalls(name, self.work / name, db=path, service=service, store_id=store)

    def database(self, name: str) -> str:
        """A SQLite database in a folder of its own: a mount watches its database's folder
        (inotify), and every write to a watched folder costs the writer, so mounts sharing one
        would tax each other's saves."""
        folder = self.work / f"{name}-db"
        folder.mkdir()
        return str(folder / "mnemofs.sqlite")

    def code_of(self, rev: str) -> Path:
        """The ``src/`` of git revision ``rev`` of this checkout, exported into the work
        folder (``git archive``: no worktree to clean up)."""
        repo = Path(__file__).resolve().parent.parent
        dest = self.work / "baseline-code"
        if dest.exists():  # exported already (for baseline-pg)
            return dest / "src"
        dest.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", rev, "src/mnemofs"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        # Compiled as this checkout's code is (scripts/_setup.sh), so both start alike.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src")], check=True)
        return dest / "src"

    def remote(self) -> tuple[Target, Path]:
        """A server on its own database and two remote mounts of one store (two sessions, each
        with its token): the first for the workload, the second to watch what it saves."""
        import json
        import socket
        import urllib.request

        db = self.work / "remote.sqlite"
        cli = [sys.executable, "-m", "mnemofs", "--db", str(db)]
        run = subprocess.run
        run([*cli, "stores", "create", "Bench"], check=True, stdout=subprocess.DEVNULL)
        tokens = []
        for _ in range(2):
            made = run(
                [*cli, "--json", "sessions", "create", "--attach", "Bench"],
                check=True,
                capture_output=True,
                text=True,
            )
            session = json.loads(made.stdout)["id"]
            tokens.append(
                run(
                    [*cli, "sessions", "token", session],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = subprocess.Popen(
            [*cli, "serve", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(server)  # stopped after the mounts
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        roots = []
        for i, token in enumerate(tokens):
            root = self.work / f"remote-{i}"
            argv = [sys.executable, "-m", "mnemofs", "mount", "--server", url]
            self.start(
                [*argv, "--root", str(root), "--foreground"],
                root,
                env={**os.environ, "MNEMOFS_TOKEN": token},
            )
            wait_mounted(root)
            roots.append(root / "bench")
        return Target("remote", roots[0], db=db), roots[1]


def fill(db: str, bench_id: str, count: int, room: int) -> list[str]:
    """``count`` memories of ~1 KiB, through the Python API, in 100 folders: as many in store
    ``bench_id`` as leave ``room`` for the workload under the per-store limit, the rest in a
    store "Full". Returns the ids of the stores to attach."""
    from mnemofs import limits
    from mnemofs.api import open as open_workspace

    ws = open_workspace(db)
    here = min(count, limits.MAX_MEMORIES_PER_STORE - room)
    stores = [bench_id] * here
    full = ws.memory_stores.create(name="Full").id if count > here else None
    stores += [full] * (count - here) if full else []
    body = "a remembered fact, with some words to index\n" * 24
    for i, store_id in enumerate(stores):
        ws.memory_stores.memories.create(
            store_id, path=f"/old/k{i % 100:02d}/note-{i:05d}.md", content=f"{i}\n{body}"
        )
    return [bench_id, full] if full else [bench_id]


def watch_wal(targets: list[Target], stop: threading.Event) -> None:
    while not stop.wait(0.1):
        for t in targets:
            if t.db is not None:
                try:
                    size = os.stat(f"{t.db}-wal").st_size
                except FileNotFoundError:
                    continue
                t.wal_max = max(t.wal_max, size)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def visibility(writer: Path, reader: Path, samples: int = 50) -> None:
    """How long a file saved through one remote mount takes to show in the other."""
    seen = []
    for i in range(samples):
        name = f"visible-{i}.md"
        (writer / name).write_bytes(b"x\n")
        start = time.perf_counter()
        while not (reader / name).exists():
            if time.perf_counter() - start > 10:
                break
            time.sleep(0.002)
        seen.append((time.perf_counter() - start) * 1000)
        time.sleep(0.05)
    seen.sort()
    print(
        f"cross-mount visibility through the server ({samples} saves): "
        f"p50 {seen[len(seen) // 2]:.0f} ms, p90 {seen[int(len(seen) * 0.9)]:.0f} ms, "
        f"max {seen[-1]:.0f} ms"
    )


def report(targets: list[Target], repeat: int, files: int, texts: Texts) -> None:
    med = {t.name: {k: statistics.median(r[k] for r in t.runs) for k in t.runs[0]} for t in targets}
    runs = {t.name: t.runs for t in targets}
    ratios = [("mnemofs", "bindfs"), ("mnemofs", "rclone")]
    ratios += [(n, "mnemofs") for n in ("mnemofs-full", "mnemofs-pg", "remote") if n in med]
    ratios += [("mnemofs", "baseline"), ("mnemofs-pg", "baseline-pg")]
    ratios += [("mnemofs", "store"), ("mnemofs-pg", "store-pg")]
    ratios = [(a, b) for a, b in ratios if a in med and b in med]
    print(
        f"\n{files} files of 4 KiB ({'prose' if texts.prose else 'x bytes'}) in {DIRS} "
        f"directories; ops/s, median of {repeat} rounds; "
        "each ratio the median of the rounds' own"
    )
    # The mounts and the client run on this interpreter: its build moves every column.
    print(f"Python {platform.python_version()} ({os.path.realpath(sys.executable)})")
    cols = [t.name for t in targets]
    names = [a.removeprefix("mnemofs-") + "/" + b for a, b in ratios]
    labels = [(name, max(16, len(name) + 2)) for name in names]  # (label, column width)
    print(
        f"{'phase':<20}"
        + "".join(f"{n:>13}" for n in cols)
        + "".join(f"{label:>{width}}" for label, width in labels)
    )
    failed = {t.name: t.failed for t in targets}
    for phase in med[cols[0]]:
        row = f"{phase:<20}" + "".join(_cell(med[n][phase], ",.0f").rjust(13) for n in cols)
        for (a, b), (_, width) in zip(ratios, labels, strict=True):
            mark = "*" if failed[a][phase] or failed[b][phase] else ""
            row += (_cell(paired(runs[a], runs[b], phase), ".2f") + mark).rjust(width)
        print(row)
    for t in targets:
        for phase, count in t.failed.items():
            print(
                f"* {t.name} failed {count} {phase} calls over the rounds: its ops/s counts "
                "those that succeeded (a failed call may have cost it less or more)"
            )


def _cell(value: float, spec: str) -> str:
    return "-" if math.isnan(value) else format(value, spec)


def floors(targets: list[Target]) -> None:
    """Where a change's time goes, in µs per call: the mount's (mnemofs), the store's call
    alone (store), and the rest (FUSE, the kernel, the client); then the best ratio a mount
    could reach with that store call if the rest cost what bindfs's whole call does
    (best/bindfs, best/rclone) and, on PostgreSQL, if the rest cost what the SQLite mount's
    does (best pg/mnemofs). Each the median of the rounds' own."""
    runs = {t.name: t.runs for t in targets}
    if not {"mnemofs", "store", "bindfs", "rclone"} <= runs.keys():
        return
    Us = dict[str, float]
    columns: list[tuple[str, Callable[[Us], float], str]] = [
        ("mnemofs", lambda t: t["mnemofs"], ",.0f"),
        ("store", lambda t: t["store"], ",.0f"),
        ("rest", lambda t: t["mnemofs"] - t["store"], ",.0f"),
        ("bindfs", lambda t: t["bindfs"], ",.0f"),
        ("best/bindfs", lambda t: t["bindfs"] / (t["bindfs"] + t["store"]), ".2f"),
        ("best/rclone", lambda t: t["rclone"] / (t["bindfs"] + t["store"]), ".2f"),
    ]
    if {"mnemofs-pg", "store-pg"} <= runs.keys():
        columns += [
            ("pg", lambda t: t["mnemofs-pg"], ",.0f"),
            ("store-pg", lambda t: t["store-pg"], ",.0f"),
            ("pg rest", lambda t: t["mnemofs-pg"] - t["store-pg"], ",.0f"),
            (
                "best pg/mnemofs",
                lambda t: t["mnemofs"] / (t["mnemofs"] - t["store"] + t["store-pg"]),
                ".2f",
            ),
        ]

    def across(phase: str, fn: Callable[[Us], float]) -> float:
        values = []
        for i in range(len(runs["store"])):
            rates = {name: r[i][phase] for name, r in runs.items()}
            values.append(fn({n: 1e6 / x if x else math.nan for n, x in rates.items()}))
        values = [v for v in values if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    widths = [max(10, len(label) + 2) for label, _, _ in columns]
    print(
        "\nWhere a change's time goes (µs per call): the mount's, its store call's alone (made "
        "in this process), the rest;\nthe best ratio that store call allows if the rest cost "
        "what bindfs's whole call does (on PostgreSQL: what the SQLite mount's rest does)"
    )
    print(
        f"{'phase':<20}"
        + "".join(label.rjust(w) for (label, _, _), w in zip(columns, widths, strict=True))
    )
    for phase in runs["store"][0]:
        if math.isnan(runs["store"][0][phase]):
            continue  # not one store call
        cells = (
            _cell(across(phase, fn), spec).rjust(w)
            for (_, fn, spec), w in zip(columns, widths, strict=True)
        )
        print(f"{phase:<20}" + "".join(cells))


def paired(a: list[dict[str, float]], b: list[dict[str, float]], phase: str) -> float:
    """The median of each round's ratio a/b: a round's two targets ran the phase seconds
    apart, while rounds are minutes apart and this machine's speed drifts by up to a factor of
    two between them; the ratio of the two medians could pair a fast round of one with a slow
    round of the other. Rounds where b did nothing (every call failed) are left out."""
    pairs = [x[phase] / y[phase] for x, y in zip(a, b, strict=True) if y[phase]]
    return statistics.median(pairs) if pairs else float("nan")


def each_round(targets: list[Target]) -> None:
    """Every round's ops/s beside the median: a column that moves from round to round (or is
    bimodal from run to run) shows which rounds made it so."""
    for t in targets:
        print(f"\n{t.name}, each round (ops/s)")
        for phase in t.runs[0]:
            print(f"{phase:<20}" + "".join(f"{r[phase]:>13,.0f}" for r in t.runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store-size", type=int, default=0, metavar="N")
    parser.add_argument("--pg", nargs="?", const="", default=None, metavar="URL")
    parser.add_argument("--remote", action="store_true")
    parser.add_argument("--against", metavar="REV", help="also mount git revision REV's code")
    parser.add_argument("--only", default="", help="comma-separated targets (default: all)")
    parser.add_argument("--dir", default="/dev/shm", help="where the work folder is made")
    parser.add_argument("--each", action="store_true", help="also print every round's ops/s")
    parser.add_argument(
        "--prose", action="store_true", help="write different made-up prose to every file"
    )
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    texts = Texts(args.prose)
    work = Path(tempfile.mkdtemp(prefix="mnemofs-bench-", dir=args.dir))
    bench = Bench(work)
    stop = threading.Event()
    notes: list[str] = []
    try:
        targets: list[Target] = []

        def want(name: str) -> bool:
            return not only or name in only

        targets += bench.standard(want, args.against)
        if want("store"):  # not in ``standard``: scripts/bench-bursts times only mounts
            targets.append(bench.store_calls("store", bench.database("store")))
        if args.store_size and want("mnemofs-full"):
            start = time.monotonic()
            full, ready = bench.mnemofs(
                "mnemofs-full", bench.database("full"), args.store_size, args.files
            )
            notes.append(
                f"mnemofs-full: {args.store_size:,} memories filled and mounted in "
                f"{time.monotonic() - start:.1f} s; the mount was ready {ready:.2f} s after start"
            )
            targets.append(full)
        if args.pg is not None and want("mnemofs-pg"):
            url = args.pg or os.environ.get("MNEMOFS_TEST_PG_URL", "")
            if not url:
                raise SystemExit("--pg needs a URL or $MNEMOFS_TEST_PG_URL")
            targets.append(bench.mnemofs("mnemofs-pg", url)[0])
            if want("store-pg"):
                targets.append(bench.store_calls("store-pg", url))
            if args.against and want("baseline-pg"):
                code = bench.code_of(args.against)
                targets.append(bench.mnemofs("baseline-pg", url, code=code)[0])
        other = None
        if args.remote and want("remote"):
            remote, other = bench.remote()
            targets.append(remote)
        watcher = threading.Thread(target=watch_wal, args=(targets, stop), daemon=True)
        watcher.start()
        for round_no in range(args.repeat):
            pids = [proc.pid for proc in bench.procs]
            run_round(targets, round_no, args.files, pids, texts)
            time.sleep(SETTLE_S)  # let background work (checkpoints, indexing) finish
            print(f"round {round_no + 1} of {args.repeat} done", file=sys.stderr)
        stop.set()
        report(targets, args.repeat, args.files, texts)
        floors(targets)
        from bench_aims import verdict  # beside this script

        aims = verdict({t.name: t.runs for t in targets}, {t.name: t.failed for t in targets})
        if aims:
            print("\n" + "\n".join(aims))
        if args.each:
            each_round(targets)
        if other is not None:
            visibility(targets[-1].path, other)
        for note in notes:
            print(note)
        for t in targets:
            if t.errors:
                shown = "; ".join(t.errors[:3]) + (" ..." if len(t.errors) > 3 else "")
                print(f"{t.name}: {len(t.errors)} calls failed: {shown}")
        daemons = [t for t in targets if t.pid is not None]
        before = {t.name: cpu_s(t.pid) for t in daemons if t.pid}
        time.sleep(IDLE_S)
        for t in daemons:
            assert t.pid is not None
            idle = (cpu_s(t.pid) - before[t.name]) / IDLE_S * 100
            wal = f"largest -wal {t.wal_max / 2**20:.1f} MiB, " if t.db else ""
            rss = rss_mb(t.pid)
            print(f"{t.name}: {wal}RSS {rss:.0f} MB after the rounds, idle CPU {idle:.2f}%")
    finally:
        stop.set()
        bench.close()
        shutil.rmtree(work, ignore_errors=True)
    if any(t.errors for t in targets if t.name.startswith(("mnemofs", "remote", "baseline"))):
        raise SystemExit("mnemofs failed calls: see above")


if __name__ == "__main__":
    main()
