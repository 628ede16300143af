"""Small-file workload on a mnemofs mount, side by side with a plain directory and bindfs.

    scripts/bench [--files 1000] [--repeat 3] [--no-remote]

The same sequential client runs on a plain directory (the baseline), a bindfs mount of one
(a C FUSE passthrough: what a FUSE request costs without a database), a mnemofs mount on a
fresh SQLite database, and a remote mnemofs mount (holding a session token, through
`mnemofs serve` on loopback, on its own fresh SQLite database), all in this run. Phases:
create+write+close of 4 KiB files in 20 directories, stat all, list all, read all, overwrite
2 KiB, append a line, sed -i, rename, delete. Prints ops/s (median of --repeat) and the ratios
mnemofs/plain, mnemofs/bindfs and remote/mnemofs; then how long a file saved through one remote
mount takes to show in another (two sessions, one store, through the server).

Read the bindfs ratio first: on these VMs the plain-directory (ext4) figures drift from run to
run by several times (create measured 21,500/s, then 1,000/s, with or without a mount), while
bindfs, bound by FUSE round trips like mnemofs, moves far less.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DIRS = 20
BLOCK = b"x" * 4096
HALF = b"y" * 2048
LINE = b"appended line\n"
SETTLE_S = 3.0


def workload(root: Path, files: int) -> dict[str, float]:
    paths = [root / f"d{i % DIRS:02d}" / f"f{i:05d}.md" for i in range(files)]
    for d in range(DIRS):
        (root / f"d{d:02d}").mkdir()
    result: dict[str, float] = {}

    def phase(name: str, fn: Callable[[Path], object], items: list[Path] = paths) -> None:
        start = time.perf_counter()
        for p in items:
            fn(p)
        result[name] = len(items) / (time.perf_counter() - start)

    def create(p: Path) -> None:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, BLOCK)
        os.close(fd)

    def read(p: Path) -> None:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 8192)
        os.close(fd)

    def overwrite(p: Path) -> None:
        fd = os.open(p, os.O_WRONLY)
        os.pwrite(fd, HALF, 0)
        os.close(fd)

    def append(p: Path) -> None:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, LINE)
        os.close(fd)

    def sed(p: Path) -> None:
        subprocess.run(["sed", "-i", "s/appended/edited/", str(p)], check=True)

    phase("create+write+close", create)
    phase("stat", os.stat)
    start = time.perf_counter()
    listed = sum(len(os.listdir(root / f"d{d:02d}")) for d in range(DIRS))
    result["list (entries)"] = listed / (time.perf_counter() - start)
    phase("read", read)
    phase("overwrite 2 KiB", overwrite)
    phase("append a line", append)
    phase("sed -i", sed, paths[: max(1, len(paths) // 5)])
    phase("rename", lambda p: os.rename(p, p.with_suffix(".txt")))
    phase("delete", lambda p: os.unlink(p.with_suffix(".txt")))
    for d in range(DIRS):
        (root / f"d{d:02d}").rmdir()
    return result


def wait_mounted(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(path):
            return
        time.sleep(0.05)
    raise SystemExit(f"{path} did not get mounted")


def start_remote(
    work: Path, procs: list[subprocess.Popen[bytes]], mounts: list[Path]
) -> tuple[Path, Path]:
    """A server on its own database and two remote mounts of one store (two sessions, each
    with its token): the first for the workload, the second to watch what the first saves."""
    import json
    import socket
    import urllib.request

    db = work / "remote.sqlite"
    cli = [sys.executable, "-m", "mnemofs", "--db", str(db)]
    run = subprocess.run  # noqa: S603
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
        token = run(
            [*cli, "sessions", "token", session], check=True, capture_output=True, text=True
        ).stdout.strip()
        tokens.append(token)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [*cli, "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    procs.append(server)
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
        root = work / f"remote-{i}"
        env = {**os.environ, "MNEMOFS_TOKEN": token}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mnemofs",
                "mount",
                "--server",
                url,
                "--root",
                str(root),
                "--foreground",
            ],
            stdout=subprocess.DEVNULL,
            env=env,
        )
        procs.insert(0, proc)  # stopped before the server
        mounts.append(root)
        wait_mounted(root)
        roots.append(root / "bench")
    return roots[0], roots[1]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-remote", action="store_true", help="skip the remote mount")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mnemofs-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    mounts: list[Path] = []
    try:
        plain = work / "plain"
        plain.mkdir()
        targets: dict[str, Path] = {"plain": plain}
        if shutil.which("bindfs"):
            src, bound = work / "bindfs-src", work / "bindfs"
            src.mkdir()
            bound.mkdir()
            subprocess.run(["bindfs", src, bound], check=True)
            mounts.append(bound)
            targets["bindfs"] = bound
        db = work / "db.sqlite"
        mnemofs = [sys.executable, "-m", "mnemofs", "--db", str(db)]
        subprocess.run(
            [*mnemofs, "stores", "create", "Bench"], check=True, stdout=subprocess.DEVNULL
        )
        root = work / "mnemofs"
        proc = subprocess.Popen(
            [*mnemofs, "mount", "--attach", "Bench", "--root", str(root), "--foreground"],
            stdout=subprocess.DEVNULL,
        )
        procs.append(proc)
        mounts.append(root)
        wait_mounted(root)
        targets["mnemofs"] = root / "bench"
        if not args.no_remote:
            remote, other = start_remote(work, procs, mounts)
            targets["remote"] = remote

        runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for _ in range(args.repeat):
            for name, path in targets.items():  # interleaved, so noise hits all alike
                runs[name].append(workload(path, args.files))
                time.sleep(SETTLE_S)  # let background work (WAL checkpoints) finish first
        med = {
            name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for name, rs in runs.items()
        }
        names = list(targets)
        print(f"{args.files} files of 4 KiB in {DIRS} directories; ops/s, median of {args.repeat}")
        header = f"{'phase':<20}" + "".join(f"{n:>11}" for n in names)
        header += f"{'mnemofs/plain':>15}" + (f"{'mnemofs/bindfs':>16}" if "bindfs" in med else "")
        header += f"{'remote/mnemofs':>16}" if "remote" in med else ""
        print(header)
        for phase_name in med["plain"]:
            row = f"{phase_name:<20}" + "".join(f"{med[n][phase_name]:>11.0f}" for n in names)
            row += f"{med['mnemofs'][phase_name] / med['plain'][phase_name]:>15.3f}"
            if "bindfs" in med:
                row += f"{med['mnemofs'][phase_name] / med['bindfs'][phase_name]:>16.2f}"
            if "remote" in med:
                row += f"{med['remote'][phase_name] / med['mnemofs'][phase_name]:>16.2f}"
            print(row)
        if not args.no_remote:
            visibility(targets["remote"], other)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for path in mounts:
            subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
