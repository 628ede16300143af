"""The Dockerfile, built and run with podman, in both ways of giving a container its memory.

Mode 1: the daemon runs on the host and a sandbox container gets the mount bind-mounted, even
when the mount is made after the container started (mount propagation). Mode 2: the daemon
runs in the container, on SQLite in a volume or on PostgreSQL. Either way the agent inside is
a non-root user that reads everything, writes a read_write store (versions on the host side)
and gets EROFS from a read_only store and from the root.

scripts/test installs podman and makes the local base image these builds start from; without
them these tests fail, unless a developer opts out with MNEMOFS_SKIP_CONTAINERS=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemofs.store import MemoryService, make_engine

from .conftest import pg_url
from .mounted import mounted

pytestmark = pytest.mark.containers

SKIP_ENV = "MNEMOFS_SKIP_CONTAINERS"
REPO = Path(__file__).resolve().parent.parent
IMAGE = "localhost/mnemofs:test"
SANDBOX_IMAGE = "localhost/mnemofs-sandbox:test"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
# These machines run without CAP_SYS_RESOURCE, so runc cannot raise rlimits to podman's
# defaults ("error setting rlimit type 7"): ask for modest ones.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]

# What the agent does inside the container, as uid 1000.
AGENT_SCRIPT = """
set -e
cd /mnt/memory
test "$(id -u)" = 1000
ls
cat docs/readme.md
echo "from the container" > notes/a.md
cat notes/a.md
if (echo no > docs/x.md) 2>/tmp/e1; then exit 11; fi
grep -q "Read-only file system" /tmp/e1
if (mkdir /mnt/memory/x) 2>/tmp/e2; then exit 12; fi
grep -q "Read-only file system" /tmp/e2
echo agent-ok
"""


Result = subprocess.CompletedProcess[str]


def podman(*args: str, check: bool = True, timeout: float = 600) -> Result:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:3])} ... failed: {result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def image() -> str:
    return _build(IMAGE)


@pytest.fixture(scope="module")
def sandbox_image(image: str) -> str:
    """The Dockerfile's sandbox target (after the whole image: it reuses its build stage)."""
    return _build(SANDBOX_IMAGE, "--target", "sandbox")


def _build(tag: str, *args: str) -> str:
    base = os.environ.get("MNEMOFS_BASE_IMAGE", "localhost/mnemofs-base:bookworm")
    problem = None
    if shutil.which("podman") is None:
        problem = "podman is not installed"
    elif not os.path.exists("/dev/fuse"):
        problem = "/dev/fuse is missing"
    elif subprocess.run(["podman", "image", "exists", base]).returncode != 0:
        problem = f"the base image {base} is missing"
    if problem:
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"container tests skipped ({SKIP_ENV}=1)")
        pytest.fail(f"{problem}: run through scripts/test, or set {SKIP_ENV}=1 to skip on purpose")
    build = ["build", "--network", "host", "--build-arg", f"BASE={base}", "-t", tag, *args]
    if os.path.exists(HOST_CA):  # pip may reach the index only through this machine's CAs
        build += [
            "-v",
            f"{HOST_CA}:/etc/ssl/build-ca.crt:ro",
            "--build-arg",
            "PIP_CERT=/etc/ssl/build-ca.crt",
        ]
    podman(*build, str(REPO), timeout=1200)
    return tag


def seed(service: MemoryService) -> tuple[str, str]:
    notes = service.create_store("Notes").id
    docs = service.create_store("Docs").id
    service.create_memory(docs, "/readme.md", "read me\n")
    return notes, docs


def wait_until_mounted(name: str, timeout: float = 60) -> None:
    """Until the daemon in container ``name`` says it mounted (its log says why it did not)."""
    deadline = time.monotonic() + timeout
    while "mnemofs: mounted" not in podman("logs", name, check=False).stdout:
        assert time.monotonic() < deadline, podman("logs", name, check=False).stderr
        time.sleep(0.2)


def check_agent(result: Result) -> None:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.split() == [
        "docs",
        "notes",
        "read",
        "me",
        "from",
        "the",
        "container",
        "agent-ok",
    ]


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory bind-mounted onto itself and made shared, as the README tells hosts to do
    with /mnt/memory, so a mount made there later reaches containers that bind it rslave."""
    root = tmp_path / "memory"
    root.mkdir()
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(root)], check=True)
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_mode1_daemon_on_the_host(image: str, shared_dir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mnemofs.db'}"
    service = MemoryService(make_engine(url), actor="api")
    notes, docs = seed(service)
    session = service.create_session(
        [{"memory_store_id": notes}, {"memory_store_id": docs, "access": "read_only"}],
        mount_root=str(shared_dir),
    )
    name = f"mnemofs-sandbox-{uuid.uuid4().hex[:8]}"
    # The sandbox starts first, with /mnt/memory bound rslave; the mount comes later.
    bind = f"{shared_dir}:/mnt/memory:rslave"
    podman(
        "run",
        "-d",
        "--name",
        name,
        *LIMITS,
        "--network",
        "none",
        "--user",
        "1000:1000",
        "-v",
        bind,
        "--entrypoint",
        "sleep",
        image,
        "600",
    )
    try:
        with mounted(
            url, session.id, shared_dir, "--allow-other", "--uid", "1000", "--gid", "1000"
        ):
            check_agent(podman("exec", name, "sh", "-c", AGENT_SCRIPT, check=False))
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)
    memory = service.find_memory(notes, "/a.md")
    assert memory.content == "from the container\n"
    assert [v.created_by.stored for v in service.list_versions(notes)] == [session.id]
    service.close()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_mode2_daemon_in_the_container(image: str, backend: str) -> None:
    name = f"mnemofs-memory-{uuid.uuid4().hex[:8]}"
    volume = f"{name}-data"
    if backend == "sqlite":  # the database lives in a volume; the host reads it through podman
        db_args = ["-v", f"{volume}:/data"]
        podman("volume", "create", volume)

        def cli(*args: str) -> str:
            return podman(
                "run", "--rm", *LIMITS, "--network", "none", *db_args, image, *args
            ).stdout
    else:  # a PostgreSQL server reached by URL (here: the suite's, through its socket dir)
        url = pg_url()
        socket_dir = url.split("host=", 1)[1].split("&", 1)[0]
        db_args = ["-v", f"{socket_dir}:{socket_dir}", "-e", f"MNEMOFS_DB={url}"]
        from .conftest import _fresh_pg_engine

        pg = MemoryService(_fresh_pg_engine(), actor="api")

        def cli(*args: str) -> str:
            return podman(
                "run", "--rm", *LIMITS, "--network", "none", *db_args, image, *args
            ).stdout

    try:
        cli("stores", "create", "Notes")
        cli("stores", "create", "Docs")
        cli("memories", "create", "Docs", "/readme.md", "--content", "read me\n")
        podman(
            "run",
            "-d",
            "--name",
            name,
            *LIMITS,
            "--network",
            "none",
            "--device",
            "/dev/fuse",
            "--cap-add",
            "SYS_ADMIN",
            "--user",
            "root",
            *db_args,
            image,
            "mount",
            "--attach",
            "Notes",
            "--attach",
            "Docs:read_only",
            "--allow-other",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--foreground",
        )
        wait_until_mounted(name)
        check_agent(podman("exec", "--user", "agent", name, "sh", "-c", AGENT_SCRIPT, check=False))
        podman("stop", "-t", "30", name)  # SIGTERM: save, unmount, exit
        assert "unmounted /mnt/memory" in podman("logs", name).stderr
        versions = json.loads(cli("--json", "versions", "list", "Notes"))["data"]
        assert [(v["operation"], v["path"]) for v in versions] == [("created", "/a.md")]
        assert cli("memories", "cat", "Notes", "/a.md") == "from the container\n"
        if backend == "postgres":
            assert pg.find_memory(pg.resolve_store("Notes"), "/a.md").content_size_bytes == 19
            pg.close()
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)
        if backend == "sqlite":
            podman("volume", "rm", "-f", volume, check=False)


def test_mode3_api_server_in_the_container(image: str) -> None:
    """The image serves the HTTP API: a key made with the image's CLI, the server on the host's
    loopback, a store and a memory made over HTTP, a clean stop on SIGTERM."""
    import urllib.request

    from .served import free_port

    name = f"mnemofs-api-{uuid.uuid4().hex[:8]}"
    volume = f"{name}-data"
    podman("volume", "create", volume)
    port = free_port()
    try:
        run = ["run", "--rm", *LIMITS, "--network", "none", "-v", f"{volume}:/data", image]
        key = podman(*run, "keys", "create", "admin").stdout.strip()
        assert key.startswith("mnemofs-key-")
        podman(
            "run",
            "-d",
            "--name",
            name,
            *LIMITS,
            "--network",
            "host",
            "-v",
            f"{volume}:/data",
            image,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        )
        base = f"http://127.0.0.1:{port}"

        def call(method: str, path: str, body: object = None) -> dict[str, object]:
            request = urllib.request.Request(
                base + path,
                method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"x-api-key": key, "content-type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]

        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, podman("logs", name, check=False).stderr
                time.sleep(0.2)
        store = call("POST", "/v1/memory_stores", {"name": "Notes"})
        made = call(
            "POST", f"/v1/memory_stores/{store['id']}/memories", {"path": "/a.md", "content": "hi"}
        )
        assert made["content_size_bytes"] == 2
        podman("stop", "-t", "30", name)
        logs = podman("logs", name).stderr
        assert key not in logs
        access = [json.loads(line) for line in logs.splitlines() if '"mnemofs.http.access"' in line]
        assert [(a["method"], a["status"]) for a in access][-2:] == [("POST", 200), ("POST", 200)]
        assert podman(*run, "memories", "cat", "Notes", "/a.md").stdout == "hi"
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)
        podman("volume", "rm", "-f", volume, check=False)


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_mode2_over_the_server_with_only_a_token(
    sandbox_image: str, backend: str, tmp_path: Path
) -> None:
    """Mode 2 as a sandbox should run it, from the sandbox image: the daemon inside holds one
    session token (from the environment) and a server address; no database URL, file or
    route, nor the packages to open one. The agent writes its read_write store (one version,
    by the session), gets EROFS on the read_only one; a process inside with the token cannot
    read another session's store, and a sync worker there keeps a folder in step too."""
    from .conftest import _fresh_pg_engine
    from .mounted import token_for
    from .served import serving

    if backend == "sqlite":
        db_url = f"sqlite:///{tmp_path / 'host.db'}"
        engine = make_engine(db_url)
    else:
        db_url = pg_url()
        engine = _fresh_pg_engine()
    service = MemoryService(engine, actor="api")
    notes, docs = seed(service)
    theirs = service.create_store("Theirs").id
    service.create_memory(theirs, "/secret.md", "not yours\n")
    session = service.create_session(
        [{"memory_store_id": notes}, {"memory_store_id": docs, "access": "read_only"}]
    )
    service.create_session([{"memory_store_id": theirs}])
    name = f"mnemofs-remote-{uuid.uuid4().hex[:8]}"
    with serving(db_url, tmp_path / "server.log") as server:
        token = token_for(db_url, session.id)
        os.environ["MNEMOFS_TOKEN"] = token  # handed over by name: never on a command line
        try:
            podman(
                "run",
                "-d",
                "--name",
                name,
                *LIMITS,
                "--network",
                "host",
                "--device",
                "/dev/fuse",
                "--cap-add",
                "SYS_ADMIN",
                "--user",
                "root",
                "-e",
                "MNEMOFS_TOKEN",
                "-e",
                f"MNEMOFS_SERVER={server.url}",
                sandbox_image,
                "mount",
                "--allow-other",
                "--uid",
                "1000",
                "--gid",
                "1000",
                "--foreground",
            )
            wait_until_mounted(name)
            check_agent(
                podman("exec", "--user", "agent", name, "sh", "-c", AGENT_SCRIPT, check=False)
            )
            probe = (
                "import os, urllib.request as u\n"
                "r = u.Request(os.environ['MNEMOFS_SERVER'] + "
                f"'/v1/memory_stores/{theirs}/memories', "
                "headers={'authorization': 'Bearer ' + os.environ['MNEMOFS_TOKEN']})\n"
                "try:\n    u.urlopen(r)\n    print('read it')\n"
                "except Exception as e:\n    print(getattr(e, 'code', e))\n"
            )
            got = podman("exec", name, "python3", "-c", probe, check=False).stdout.strip()
            assert got == "404"
            no_db = podman("exec", name, "mnemofs", "stores", "list", check=False)
            assert no_db.returncode == 1
            assert "database's packages are not installed here" in no_db.stderr, no_db.stderr
            for package in ("sqlalchemy", "psycopg", "uvicorn", "fastapi", "detect_secrets"):
                held = podman("exec", name, "python3", "-c", f"import {package}", check=False)
                assert held.returncode != 0, package
            synced = podman(
                "exec",
                "--user",
                "agent",
                name,
                "sh",
                "-c",
                "mnemofs sync --root ~/memory --once && cat ~/memory/notes/a.md",
                check=False,
            )
            assert synced.returncode == 0, synced.stderr
            assert synced.stdout.splitlines()[-1] == "from the container"
            podman("stop", "-t", "30", name)
        finally:
            os.environ.pop("MNEMOFS_TOKEN", None)
            podman("rm", "-f", "-t", "0", name, check=False)
        logs = server.log.read_text()
        assert token not in logs
    versions = [
        (v.operation, v.path, v.created_by.id if v.created_by else None)
        for v in service.list_versions(notes)
    ]
    assert versions == [("created", "/a.md", session.id)]
    assert service.find_memory(notes, "/a.md").content == "from the container\n"
    service.close()
