"""The HTTP API's requests/s and latency (p50, p99) beside the same operations in-process.

    scripts/bench-api [--postgres] [--requests 2000] [--workers 1]

For each backend (SQLite in a temp dir; with --postgres also a database of its own on the
server in $MNEMOFS_TEST_PG_URL, dropped at the end) it starts the real server process
(``mnemofs serve``) and times, with 1 and with 8 concurrent clients: retrieve a memory, list a
page of 100, create a memory, update a memory's content. Each HTTP client is a thread with
one keep-alive connection (http.client: the cheapest Python client, so the figures are the
server's). The same operations then run through MemoryService in as many threads, in the same
run. Aims: HTTP update throughput >= 0.5x in-process; retrieve p50 <= 2 ms on loopback.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from soak import pg_admin_sql, with_database

from mnemofs.store import MemoryService, make_engine

OPS = ("retrieve", "list100", "create", "update")
CONTENT = "A memory of a few hundred bytes, as agents write them.\n" * 6


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(db: str, workers: int, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mnemofs",
                "serve",
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            env={**os.environ, "MNEMOFS_DB": db},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
            return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start:\n{log.read_text()[-2000:]}") from None
            time.sleep(0.05)


def timed(
    clients: int, total: int, make: Callable[[int], Callable[[int], None]]
) -> tuple[float, list[float]]:
    """Run ``total`` calls split over ``clients`` threads; ``make(c)`` gives client c's call."""
    per = total // clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    calls = [make(c) for c in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def worker(c: int) -> None:
        call, out = calls[c], latencies[c]
        barrier.wait()
        for i in range(per):
            t = time.perf_counter()
            call(i)
            out.append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return per * clients / wall, [x for lat in latencies for x in lat]


class Http:
    """One keep-alive connection: a client of the benchmark."""

    def __init__(self, port: int, key: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}

    def __call__(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body)
        self.conn.request(method, path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise SystemExit(f"{method} {path}: {response.status} {payload[:300]!r}")
        return payload


def bench_backend(name: str, db: str, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    service = MemoryService(make_engine(db), actor="bench")
    key = service.create_api_key("bench").key
    assert key is not None
    reads = service.create_store(f"bench-reads-{name}").id
    ids = [service.create_memory(reads, f"/dir/{i:03d}.md", CONTENT).id for i in range(100)]
    process, port = start_server(db, args.workers, work / f"server-{name}.log")
    rows: list[dict[str, Any]] = []
    try:
        for clients in (1, 8):
            for op in OPS:
                http_rate, http_lat = run_op(
                    op, clients, args.requests, service, reads, ids, port, key, "http"
                )
                local_rate, local_lat = run_op(
                    op, clients, args.requests, service, reads, ids, port, key, "local"
                )
                rows.append(
                    {
                        "backend": name,
                        "op": op,
                        "clients": clients,
                        "http": (http_rate, pct(http_lat, 50), pct(http_lat, 99)),
                        "local": (local_rate, pct(local_lat, 50), pct(local_lat, 99)),
                    }
                )
                print_row(rows[-1])
    finally:
        process.terminate()
        process.wait(timeout=60)
        service.close()
    return rows


def run_op(
    op: str,
    clients: int,
    total: int,
    service: MemoryService,
    reads: str,
    ids: list[str],
    port: int,
    key: str,
    how: str,
) -> tuple[float, list[float]]:
    if op in ("create", "update"):
        total = total // 2  # writes: fewer, and a fresh store for each run
        store = service.create_store(f"bench-{op}-{how}-{clients}-{time.monotonic_ns()}").id
    else:
        store = reads
    own: dict[int, str] = {}
    if op == "update":
        for c in range(clients):
            own[c] = service.create_memory(store, f"/own-{c}.md", CONTENT).id

    def make(c: int) -> Callable[[int], None]:
        base = f"/v1/memory_stores/{store}/memories"
        if how == "http":
            h = Http(port, key)
            if op == "retrieve":
                return lambda i: h("GET", f"{base}/{ids[(i + c) % 100]}")
            if op == "list100":
                return lambda i: h("GET", f"{base}?limit=100")
            if op == "create":
                return lambda i: h("POST", base, {"path": f"/c{c}/{i}.md", "content": CONTENT})
            return lambda i: h("POST", f"{base}/{own[c]}", {"content": f"{CONTENT}{i}"})
        if op == "retrieve":
            return lambda i: service.get_memory(store, ids[(i + c) % 100]) and None
        if op == "list100":
            return lambda i: service.list_memories(store, limit=100) and None
        if op == "create":
            return lambda i: service.create_memory(store, f"/c{c}/{i}.md", CONTENT) and None
        return lambda i: service.update_memory(store, own[c], content=f"{CONTENT}{i}") and None

    return timed(clients, total, make)


def pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000


HEADER = (
    f"{'backend':<10} {'operation':<9} {'clients':>7} | {'HTTP req/s':>10} {'p50 ms':>7} "
    f"{'p99 ms':>7} | {'in-process/s':>12} {'p50 ms':>7} {'p99 ms':>7} | {'HTTP/in-proc':>12}"
)


def print_row(row: dict[str, Any]) -> None:
    h, loc = row["http"], row["local"]
    print(
        f"{row['backend']:<10} {row['op']:<9} {row['clients']:>7} | {h[0]:>10,.0f} {h[1]:>7.2f} "
        f"{h[2]:>7.2f} | {loc[0]:>12,.0f} {loc[1]:>7.2f} {loc[2]:>7.2f} | {h[0] / loc[0]:>11.2f}x",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--postgres", action="store_true", help="also on $MNEMOFS_TEST_PG_URL's server"
    )
    parser.add_argument("--requests", type=int, default=2000, help="reads per phase (writes: half)")
    parser.add_argument("--workers", type=int, default=1, help="server processes")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mnemofs-bench-api."))
    pg_admin = pg_name = ""
    try:
        print(HEADER)
        bench_backend("sqlite", f"sqlite:///{work / 'bench.db'}", args, work)
        if args.postgres:
            pg_admin = os.environ["MNEMOFS_TEST_PG_URL"]
            pg_name = f"mnemofs_bench_api_{os.getpid()}"
            pg_admin_sql(pg_admin, f"CREATE DATABASE {pg_name}")
            bench_backend("postgresql", with_database(pg_admin, pg_name), args, work)
    finally:
        if pg_name:
            pg_admin_sql(pg_admin, f"DROP DATABASE IF EXISTS {pg_name} WITH (FORCE)")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
