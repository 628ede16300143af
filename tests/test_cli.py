"""The ``mnemofs`` CLI: every command, its output, its exit codes — on both backends."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mnemofs.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    def __init__(self, db_url: str, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch):
        self.db_url = db_url
        self.capsys = capsys
        self.mp = mp

    def __call__(self, *args: str, stdin: bytes = b"") -> Result:
        self.capsys.readouterr()
        self.mp.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            main(["--db", self.db_url, *args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def ok(self, *args: str, stdin: bytes = b"") -> Result:
        result = self(*args, stdin=stdin)
        assert result.code == 0, result.err
        return result

    def json(self, *args: str, stdin: bytes = b"") -> Any:
        return self.ok("--json", *args, stdin=stdin).json

    def refused(self, code: int, *args: str, stdin: bytes = b"") -> str:
        result = self(*args, stdin=stdin)
        assert result.code == code, (result.code, result.err)
        lines = result.err.strip().splitlines()
        assert len(lines) == 1, result.err  # one line on stderr
        assert result.out == ""
        return lines[0]


@pytest.fixture
def cli(db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(db_url, capsys, monkeypatch)


def test_stores_commands(cli: Cli) -> None:
    store = cli.json("stores", "create", "Demo Memory", "--description", "A demo.")
    assert store["id"].startswith("memstore_")
    assert {"id", "name", "description", "created_at", "updated_at", "archived_at"} <= set(store)
    table = cli.ok("stores", "list").out
    assert "Demo Memory" in table
    assert store["id"] in table
    assert cli.json("stores", "show", "Demo Memory")["id"] == store["id"]
    cli.ok("memories", "create", "Demo Memory", "/a.md", "--content", "café")
    used = cli.json("stores", "usage", "Demo Memory")
    assert (used["memories"], used["versions"], used["texts"], used["text_bytes"]) == (1, 1, 1, 5)
    shown = cli.ok("stores", "usage", store["id"]).out
    assert "directories        0 (of at most 10000)" in shown, shown
    assert "text_bytes         5" in shown, shown
    updated = cli.json("stores", "update", store["id"], "--name", "Renamed", "--description", "")
    assert (updated["name"], updated["description"]) == ("Renamed", "")
    assert cli.json("stores", "archive", "Renamed")["archived_at"]
    assert cli.json("stores", "list")["data"] == []
    assert [s["id"] for s in cli.json("stores", "list", "--include-archived")["data"]] == [
        store["id"]
    ]
    assert "--yes" in cli.refused(2, "stores", "delete", "Renamed")
    cli.ok("stores", "delete", "Renamed", "--yes")
    assert "not_found" in cli.refused(3, "stores", "show", "Renamed")


def test_memories_commands(cli: Cli, tmp_path: Path) -> None:
    cli.ok("stores", "create", "S")
    a = cli.json("memories", "create", "S", "/notes/a.md", "--content", "from option")
    assert a["path"] == "/notes/a.md"
    assert a["content"] == "from option"
    f = tmp_path / "b.md"
    f.write_text("from file ✓\n")
    cli.ok("memories", "create", "S", "/notes/b.md", "--file", str(f))
    cli.ok("memories", "create", "S", "/top.md", stdin=b"from stdin\n")
    assert cli.ok("memories", "cat", "S", "/notes/b.md").out == "from file ✓\n"
    assert cli.ok("memories", "cat", "S", "/top.md").out == "from stdin\n"
    assert cli.ok("memories", "cat", "S", a["id"]).out == "from option"
    shown = cli.ok("memories", "show", "S", "/notes/a.md").out
    assert a["id"] in shown
    assert "from option" in shown
    listing = cli.json("memories", "list", "S")
    assert [m["path"] for m in listing["data"]] == ["/notes/a.md", "/notes/b.md", "/top.md"]
    assert all(m["content"] is None for m in listing["data"])
    depth1 = cli.json("memories", "list", "S", "--depth", "1")["data"]
    assert [(e["type"], e["path"]) for e in depth1] == [
        ("memory_prefix", "/notes/"),
        ("memory", "/top.md"),
    ]
    page = cli.json("memories", "list", "S", "--limit", "2")
    assert len(page["data"]) == 2
    rest = cli.json("memories", "list", "S", "--limit", "2", "--page", page["next_page"])
    assert [m["path"] for m in rest["data"]] == ["/top.md"]
    assert rest["next_page"] is None
    prefixed = cli.json("memories", "list", "S", "--path-prefix", "/notes/")["data"]
    assert [m["path"] for m in prefixed] == ["/notes/a.md", "/notes/b.md"]
    table = cli.ok("memories", "list", "S", "--depth", "1").out
    assert "memory_prefix" in table

    moved = cli.json("memories", "update", "S", "/notes/a.md", "--path", "/archive/a.md")
    assert (moved["id"], moved["path"]) == (a["id"], "/archive/a.md")
    sha = moved["content_sha256"]
    cli.ok("memories", "update", "S", a["id"], "--content", "v2", "--if-sha256", sha)
    assert "precondition_failed" in cli.refused(
        4, "memories", "update", "S", a["id"], "--content", "v3", "--if-sha256", sha
    )
    assert cli.ok("memories", "cat", "S", a["id"]).out == "v2"
    cli.ok("memories", "update", "S", a["id"], "--file", "-", stdin=b"v3 from stdin")
    assert cli.ok("memories", "cat", "S", "/archive/a.md").out == "v3 from stdin"
    deleted = cli.json("memories", "delete", "S", "/archive/a.md")
    assert deleted == {"id": a["id"], "type": "memory_deleted"}
    assert "not_found" in cli.refused(3, "memories", "cat", "S", "/archive/a.md")


def test_errors_are_one_line_with_exit_codes(cli: Cli, tmp_path: Path) -> None:
    cli.ok("stores", "create", "S")
    cli.ok("memories", "create", "S", "/a.md", "--content", "x")
    assert "conflict" in cli.refused(4, "memories", "create", "S", "/a.md", "--content", "y")
    assert "invalid_request" in cli.refused(2, "memories", "create", "S", "a.md", "--content", "y")
    assert "'/a.md/b'" in cli.refused(4, "memories", "create", "S", "/a.md/b", "--content", "y")
    big = "x" * 102_401
    assert "limit_exceeded" in cli.refused(
        5, "memories", "create", "S", "/big.md", "--content", big
    )
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    message = cli.refused(2, "memories", "create", "S", "/l.md", "--file", str(latin1))
    assert "UTF-8" in message
    assert "usage" in cli.refused(
        2, "memories", "create", "S", "/x.md", "--content", "a", "--file", str(latin1)
    )
    assert "usage" in cli.refused(2, "memories", "list", "S", "--depth", "two")
    assert "depth" in cli.refused(2, "memories", "list", "S", "--depth", "2")
    assert "not_found" in cli.refused(3, "memories", "list", "Nope")
    for command in ("memories", "versions"):  # 0 is no "no limit": every bad limit is refused
        assert "limit 0" in cli.refused(2, command, "list", "S", "--limit", "0")
    cli.ok("stores", "archive", "S")
    assert "store_archived" in cli.refused(6, "memories", "create", "S", "/b.md", "--content", "y")
    assert [m["path"] for m in cli.json("memories", "list", "S")["data"]] == ["/a.md"]


def test_versions_commands(cli: Cli) -> None:
    cli.ok("stores", "create", "S")
    mem = cli.json("memories", "create", "S", "/a.md", "--content", "secret")
    cli.ok("memories", "update", "S", "/a.md", "--content", "clean")
    listing = cli.json("versions", "list", "S")["data"]
    assert [v["operation"] for v in listing] == ["modified", "created"]
    cli_actor = {"type": "service_account_actor", "service_account_id": "cli"}
    assert [v["created_by"] for v in listing] == [cli_actor, cli_actor]
    assert [v["operation"] for v in cli.json("versions", "list", "S", "--memory", "/a.md")["data"]]
    page = cli.json("versions", "list", "S", "--memory", mem["id"], "--limit", "1")
    assert len(page["data"]) == 1
    assert page["next_page"]
    old = listing[1]["id"]
    assert cli.json("versions", "show", "S", old)["content"] == "secret"
    assert "conflict" in cli.refused(4, "versions", "redact", "S", listing[0]["id"])
    redacted = cli.json("versions", "redact", "S", old)
    assert redacted["redacted_at"]
    assert redacted["content"] is None
    assert redacted["path"] is None
    assert "REDACTED" in cli.ok("versions", "list", "S").out
    assert cli.json("versions", "prune", "S") == {"pruned": 0}
    out = cli.ok("versions", "prune", "S", "--older-than-days", "0", "--keep-last", "1").out
    assert out.strip() == "pruned 1 version(s)"
    assert "keep_last" in cli.refused(2, "versions", "prune", "S", "--keep-last", "0")


def test_sessions_commands(cli: Cli, tmp_path: Path) -> None:
    a = cli.json("stores", "create", "Demo Memory", "--description", "demo")["id"]
    cli.ok("stores", "create", "Ref: Standards")
    cli.ok("stores", "create", "Third")
    session = cli.json(
        "sessions", "create", "--attach", "Demo Memory", "--attach", "Ref: Standards:read_only"
    )
    assert [(r["memory_store_id"], r["access"], r["mount_path"]) for r in session["resources"]] == [
        (a, "read_write", "/mnt/memory/demo-memory"),
        (session["resources"][1]["memory_store_id"], "read_only", "/mnt/memory/ref-standards"),
    ]
    assert cli.json("sessions", "show", session["id"]) == session
    note = cli.ok("sessions", "prompt", session["id"]).out
    assert "/mnt/memory/demo-memory/" in note
    assert "untrusted" in note
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "- type: memory_store\n  memory_store_id: Third\n  access: read_only\n"
        "  instructions: Look here first.\n"
    )
    from_yaml = cli.json("sessions", "create", "--spec", str(spec), "--root", "/tmp/mem")
    assert from_yaml["resources"][0]["instructions"] == "Look here first."
    assert from_yaml["resources"][0]["mount_path"] == "/tmp/mem/third"
    spec_json = tmp_path / "spec.json"
    spec_json.write_text(json.dumps([{"type": "memory_store", "memory_store_id": a}]))
    assert cli.json("sessions", "create", "--spec", str(spec_json))["resources"][0]["access"] == (
        "read_write"
    )
    assert "twice" in cli.refused(2, "sessions", "create", "--attach", a, "--attach", a)
    assert cli.json("sessions", "end", session["id"])["ended_at"]
    table = cli.ok("sessions", "show", session["id"]).out
    assert "/mnt/memory/demo-memory" in table


def test_db_upgrade(cli: Cli) -> None:
    assert cli.ok("db", "upgrade").out.strip() == "database schema is up to date"


def test_console_script_end_to_end(tmp_path: Path) -> None:
    """The installed ``mnemofs`` program, with the database from ``$MNEMOFS_DB``."""
    env = {**os.environ, "MNEMOFS_DB": str(tmp_path / "db.sqlite")}
    exe = Path(sys.executable).parent / "mnemofs"

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *args], input=stdin, capture_output=True, text=True, env=env, check=False
        )

    assert run("stores", "create", "Demo").returncode == 0
    assert run("memories", "create", "Demo", "/hello.md", stdin="hello\n").returncode == 0
    assert run("memories", "cat", "Demo", "/hello.md").stdout == "hello\n"
    missing = run("memories", "cat", "Demo", "/nope.md")
    assert missing.returncode == 3
    assert missing.stderr.count("\n") == 1
    assert (tmp_path / "db.sqlite").exists()


def test_a_read_never_creates_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in a path must not look like an empty workspace: reads name the missing file;
    only ``stores create`` and ``db upgrade`` make a database where --db points."""
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    cli = Cli(f"sqlite:///{missing}", capsys, monkeypatch)
    for command in (
        ("stores", "list"),
        ("versions", "list", "S"),
        ("db", "check"),
        ("memories", "list", "S"),
    ):
        result = cli(*command)
        assert result.code == 1, command
        assert str(missing) in result.err
        assert result.err.count("\n") == 1
    assert not (tmp_path / "no").exists()
    cli.ok("stores", "create", "S")
    assert missing.exists()
    upgraded = tmp_path / "other" / "y.db"
    Cli(str(upgraded), capsys, monkeypatch).ok("db", "upgrade")
    assert upgraded.exists()


def test_journal_commands(cli: Cli) -> None:
    store = cli.json("stores", "create", "Turns", "--kind", "journal")
    assert store["kind"] == "journal"
    turn = {"sessionId": "s1", "channelId": "cli", "status": "completed", "result": "é" * 10}
    done = cli.json(
        "journal", "append", "Turns", "--record", json.dumps(turn), "--max-text-length", "4"
    )
    assert done == {"appended": 1, "path": "/journal.jsonl"}
    batch = "\n".join(json.dumps({**turn, "sessionId": f"s{i}"}) for i in (2, 3)) + "\n"
    assert cli.ok("journal", "append", "Turns", stdin=batch.encode()).out.startswith(
        "appended 2 record(s)"
    )
    bad = batch + '{"sessionId": "s4", "channelId": "cli", "status": "maybe"}\n'
    line = cli.refused(2, "journal", "append", "Turns", stdin=bad.encode())
    assert "record 3: 'status' must be 'completed' or 'failed'" in line
    assert cli.refused(2, "journal", "append", "Turns", "--record", "{oops").startswith(
        "mnemofs: invalid_request: record 1 is not valid JSON"
    )
    text = cli.ok("memories", "cat", "Turns", "/journal.jsonl").out
    records = [json.loads(x) for x in text.splitlines()]
    assert [r["sessionId"] for r in records] == ["s1", "s2", "s3"]  # nothing of the bad batch
    assert records[0]["result"] == "éééé"
    cli.ok("stores", "create", "Notes")
    line = cli.refused(2, "journal", "append", "Notes", "--record", json.dumps(turn))
    assert "is not a journal" in line
    session = cli.json("sessions", "create", "--attach", "Turns")
    assert session["resources"][0]["access"] == "read_only"
    assert "is a journal" in cli.refused(2, "sessions", "create", "--attach", "Turns:read_write")


@pytest.mark.parametrize(
    ("missing", "argv", "said"),
    [
        (
            "alembic",
            ["stores", "create", "Notes"],
            "the database's packages are not installed here",
        ),
        ("uvicorn", ["serve", "--port", "1"], "pip install 'mnemofs[server]'"),
    ],
)
def test_a_missing_package_is_one_line_not_a_traceback(
    tmp_path: Path, missing: str, argv: list[str], said: str
) -> None:
    """An install without some packages (the sandbox image holds the client only, a plain
    ``pip install mnemofs`` no server): the command says which and what to install."""
    script = (
        f"import sys; sys.modules[{missing!r}] = None\n"  # what an install without it gives
        "from mnemofs.cli import main\n"
        f"main(['--db', {str(tmp_path / 'db.sqlite')!r}, *{argv!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("mnemofs: "), done.stderr
    assert said in done.stderr
    assert f"({missing} is missing)" in done.stderr
    assert "Traceback" not in done.stderr
