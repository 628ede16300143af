"""Secrets at write time (issue 12): a store that refuses secrets (the default for new stores)
refuses a save whose content holds a credential, naming its kind and line and never the
credential, and changes nothing; ordinary notes never trip it; ``db scan-secrets`` reports
what is already stored."""

from __future__ import annotations

import errno
import json
import random
import re
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mnemofs import secrets
from mnemofs.errors import SecretDetected
from mnemofs.secrets import find_secrets
from mnemofs.store import Engine, MemoryService

from .mounted import mounted, wait_for

ROOT = Path(__file__).resolve().parent.parent
AWS = "AKIA" + "IOSFODNN7EXAMPLQ"  # split so no scanner flags this file itself
GITHUB = "ghp_" + "x1Y2z3" * 6
CREDENTIALS = {
    "AWS Access Key": f"aws_access_key_id = {AWS}",
    "Private Key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----",
    "GitHub Token": f"export GITHUB_TOKEN={GITHUB}",
    "Slack Token": "xoxb-" + "123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
    "Stripe Access Key": "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "Basic Auth Credentials": "DATABASE_URL=postgresql://app:" + "Tr0ub4dor3@db.internal/prod",
    "JSON Web Token": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "mnemofs API key or session token": "MNEMOFS_TOKEN=mnemofs-"
    + "token-01M8R5DKWRA31QPGPZZ3DGM743-"
    "29JiuL4Iot_NOtZsL_KLadInxKkh_XsGf00u14qUUKQ",
}
ORDINARY = """# Notes
- Use 2-space indentation in YAML; run `pytest -q` before pushing.
- The staging db is postgresql+psycopg://user:password@host/dbname (a placeholder).
- Set ${DATABASE_PASSWORD} in the environment; never commit it. See https://example.com/a:b@c
- Meeting at 10:30 with Ana; ticket PROJ-1234; sha 3f786850e387550fdab836ed7e6dc881de23001b.
- uuid 123e4567-e89b-12d3-a456-426614174000, base64 aGVsbG8gd29ybGQ=, version 1.2.3-us1
"""


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_each_kind_is_found_on_its_line(kind: str) -> None:
    text = f"first line\nsecond line\n{CREDENTIALS[kind]}\nlast\n"
    assert [(f.kind, f.line) for f in find_secrets(text)] == [(kind, 3)]


def test_a_token_is_found_on_its_own_line_only() -> None:
    """A pattern whose only group is optional: the library yields an empty "secret" when the
    group is not there, which would be found on every line."""
    token = "glcbt-" + "a1B2c3D4e5" * 3  # no optional prefix: the group is empty
    text = f"one\ntwo {token}\nthree\n"
    assert [(f.kind, f.line) for f in find_secrets(text)] == [("GitLab Token", 2)]


class _Counted(str):
    """A text that counts how often it is searched (``find``, ``count``)."""

    searches = 0

    def find(self, *args: Any) -> int:  # type: ignore[override]
        _Counted.searches += 1
        return super().find(*args)

    def count(self, *args: Any) -> int:  # type: ignore[override]
        _Counted.searches += 1
        return super().count(*args)


def test_a_run_of_credential_shapes_is_looked_through_once() -> None:
    """``AKIA`` over and over is a match every 20 characters, each the same text found again
    at every place: the screen counted newlines from the start at every place of every
    match, 23 s for 16 KiB, on the one thread of a mount or a server (found by trying what
    an agent could save). Each text is looked for once now, and the lines are the same."""
    lines = ["AKIA" * 400, "plain words", "xx " + "AKIA" * 10, "", "AKIA" * 3 + "\tAKIA" * 5]
    text = "\n".join(lines * 3)
    aws = next(
        p
        for c in secrets._checks()
        if c.pattern is not None
        for p in [c.pattern]
        if "AKIA" in p.pattern
    )
    expected = sorted({n for n, line in enumerate(text.split("\n"), 1) if aws.search(line)})
    _Counted.searches = 0
    found = find_secrets(_Counted(text))
    assert [f.line for f in found if f.kind == "AWS Access Key"] == expected
    assert _Counted.searches <= 2 * len(text) // 20  # each place once (23 million before)


def test_a_pattern_tried_line_by_line_finds_what_it_finds_everywhere() -> None:
    """npm's pattern is tried once per line, from its first ``//`` (``secrets._LINEWISE``):
    on texts built from the pieces its matches are made of, in every order, it yields what
    trying it at every place does (and 100 KiB of its prefix took 0.74 s that way)."""
    (pattern,) = [
        c.pattern
        for c in secrets._checks()
        if c.pattern is not None and c.pattern.pattern in secrets._LINEWISE
    ]
    pieces = [
        "//",
        "/",
        "registry.npmjs.org",
        "/:_authToken=",
        " ",
        "npm_",
        "abc",
        "\n",
        "0123456789abcdef-0123456789abcdef-12",
        "x",
        "//h/:_authToken=npm_tok",
        "\t",
        "\n \n",
    ]
    rng = random.Random(5)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 16)))
        everywhere = [[g for g in m.groups() if g] or [m.group()] for m in pattern.finditer(text)]
        assert list(secrets._matches(pattern, text)) == [s for found in everywhere for s in found]


def _sample(pattern: re.Pattern[str], rng: random.Random) -> str:
    """A random text ``pattern`` matches, made from the regex parser's tree of it."""
    from re import _parser  # type: ignore[attr-defined]

    pool = string.ascii_letters + string.digits + "_-+/=.:@"
    categories = {
        _parser.CATEGORY_DIGIT: string.digits,
        _parser.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
        _parser.CATEGORY_SPACE: " \n\t",
    }

    def one_of(items: list[tuple[object, object]]) -> str:
        if items and items[0][0] is _parser.NEGATE:
            return rng.choice(pool)  # may not fit: the caller checks the whole sample
        op, arg = rng.choice(items)
        if op is _parser.LITERAL:
            return chr(arg)  # type: ignore[arg-type]
        if op is _parser.RANGE:
            return chr(rng.randint(*arg))  # type: ignore[misc]
        return rng.choice(categories.get(arg, pool))

    def gen(items: list[tuple[object, object]]) -> str:
        out = ""
        for op, arg in items:
            if op is _parser.LITERAL:
                out += chr(arg)  # type: ignore[arg-type]
            elif op is _parser.NOT_LITERAL or op is _parser.ANY:
                out += rng.choice(pool.replace(chr(arg) if arg else "", ""))  # type: ignore[arg-type]
            elif op is _parser.IN:
                out += one_of(arg)  # type: ignore[arg-type]
            elif op is _parser.CATEGORY:
                out += rng.choice(categories[arg])
            elif op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT):
                low, high, sub = arg  # type: ignore[misc]
                out += "".join(gen(sub) for _ in range(rng.randint(low, min(high, low + 4))))
            elif op is _parser.SUBPATTERN:
                out += gen(arg[-1])  # type: ignore[index]
            elif op is _parser.BRANCH:
                out += gen(rng.choice(arg[1]))  # type: ignore[index]
        return out  # anchors and lookarounds add nothing: the caller checks the sample

    tree = list(_parser.parse(pattern.pattern, pattern.flags))
    for _ in range(50):
        text = gen(tree)
        if pattern.flags & re.IGNORECASE:
            text = "".join(c.upper() if rng.random() < 0.5 else c for c in text)
        if pattern.search(text + " "):
            return text
    raise AssertionError(f"no sample of {pattern.pattern!r}")


def test_the_shortcuts_miss_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The screen skips a pattern when the text lacks characters (``gate``) or text
    (``needs``) every match of it has; on texts that hold a match of each pattern in turn (in
    prose, mid-line, beside characters beyond Latin-1, or alone), it finds exactly what running
    every pattern finds."""
    checks = secrets._checks()
    assert sum(bool(c.gate) for c in checks) >= 25  # the shortcuts are on
    assert sum(c.needs is not None for c in checks) >= 20
    rng = random.Random(17)
    texts = []
    for pattern in [c.pattern for c in checks if c.pattern is not None] + [secrets._OWN]:
        for i in range(12):
            token = _sample(pattern, rng)
            wide = "\u2014" if i % 3 == 1 else "\U0001f600" if i % 3 == 2 else "e"
            texts.append(
                f"some prose {wide}\nthe key: {token} and more\n{token}\n"
                f"a {wide} line {token} end\n" + "x" * 300
            )
            texts.append(token)
    shortcut = [secrets._find(text) for text in texts]
    monkeypatch.setattr(
        secrets, "_checks", lambda: [c._replace(gate=frozenset(), needs=None) for c in checks]
    )
    monkeypatch.setattr(secrets, "_OWN_GATE", frozenset())
    everything = [secrets._find(text) for text in texts]
    assert shortcut == everything
    assert sum(bool(found) for found in everything) > len(texts) * 0.8


def test_ordinary_notes_never_trip_it() -> None:
    corpus = [ORDINARY]
    for pattern in ("README.md", "docs/*.md", "../shared/*.md", "../shared/seeds/*.txt"):
        corpus += [p.read_text() for p in sorted(ROOT.glob(pattern))]
    assert len(corpus) > 3
    for text in corpus:
        assert find_secrets(text) == [], text[:80]


def test_a_refused_save_changes_nothing_and_says_why(service: MemoryService) -> None:
    store = service.create_store("Notes")
    assert store.secrets == "refuse"  # the default for new stores
    sid = store.id
    memory = service.create_memory(sid, "/a.md", "fine\n")
    before = [(v.id, v.operation) for v in service.list_versions(sid)]
    attempts = [
        lambda: service.create_memory(sid, "/b.md", f"x\n{CREDENTIALS['GitHub Token']}\n"),
        lambda: service.update_memory(sid, memory.id, content=f"{AWS}\n"),
        lambda: service.save_file(sid, "/a.md", f"fine\n\n{CREDENTIALS['Private Key']}\n"),
        lambda: service.save_file(sid, "/c.md", f"{AWS}\n"),
    ]
    for attempt in attempts:
        with pytest.raises(SecretDetected) as info:
            attempt()
        message = info.value.message
        assert "line" in message
        assert "credential" in message
        assert AWS not in message
        assert GITHUB not in message
    with pytest.raises(SecretDetected, match=r"/b\.md: not saved: .*GitHub Token on line 2"):
        attempts[0]()
    assert [(v.id, v.operation) for v in service.list_versions(sid)] == before
    assert service.get_memory(sid, memory.id).content == "fine\n"
    # A store that allows them stores them; the policy is a store field every face shows.
    service.update_store(sid, secrets="allow")
    assert service.get_store(sid).to_dict()["secrets"] == "allow"
    service.update_memory(sid, memory.id, content=f"{AWS}\n")


def test_journal_appends_are_screened(service: MemoryService) -> None:
    journal = service.create_store("Turns", kind="journal").id
    service.append_journal(journal, '{"title": "ok"}\n')
    with pytest.raises(SecretDetected):
        service.append_journal(journal, json.dumps({"result": f"key {AWS}"}) + "\n")
    assert service.find_memory(journal, "/journal.jsonl").content == '{"title": "ok"}\n'


def test_cli_names_kind_and_line_and_scan_reports_without_the_secret(
    engine: Engine, db_url: str
) -> None:
    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mnemofs", "--db", db_url, *args],
            input=stdin,
            capture_output=True,
            text=True,
        )

    assert cli("stores", "create", "Notes").returncode == 0
    refused = cli("memories", "create", "Notes", "/k.md", stdin=f"hello\n{AWS}\n")
    assert refused.returncode == 2
    assert "AWS Access Key on line 2" in refused.stderr
    assert AWS not in refused.stderr + refused.stdout
    assert cli("stores", "create", "Old", "--secrets", "allow").returncode == 0
    assert cli("memories", "create", "Old", "/k.md", stdin=f"hello\n{AWS}\n").returncode == 0
    assert re.search(r"^secrets +allow$", cli("stores", "show", "Old").stdout, re.M)
    scan = cli("--json", "db", "scan-secrets")
    assert scan.returncode == 1
    findings = json.loads(scan.stdout)["data"]
    assert [(f["path"], f["line"], f["kind"]) for f in findings] == [("/k.md", 2, "AWS Access Key")]
    assert AWS not in scan.stdout
    assert cli("db", "scan-secrets", "--store", "Notes").returncode == 0


@pytest.mark.mounted
def test_the_mount_says_eacces_at_close_and_logs_kind_and_line(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    service = MemoryService(engine, actor="api")
    store = service.create_store("Notes").id
    service.create_memory(store, "/a.md", "fine\n")
    root = tmp_path / "mnt"
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    with mounted(db_url, session.id, root) as daemon:
        note = root / "notes" / "a.md"
        with pytest.raises(OSError) as info, open(note, "a") as f:
            f.write(f"token {GITHUB}\n")
        assert info.value.errno == errno.EACCES
        assert note.stat().st_size == len("fine\n")  # not the size the kernel had written
        assert note.read_text() == "fine\n"  # the failed save left the saved content
        with pytest.raises(OSError) as info:
            (root / "notes" / "new.md").write_text(f"{AWS}\n")
        assert info.value.errno == errno.EACCES
        assert wait_for(lambda: not (root / "notes" / "new.md").exists(), timeout=1.0)
    log = daemon.log.read_text()
    assert "/a.md: not saved" in log
    assert "GitHub Token on line 2" in log
    assert GITHUB not in log
    assert AWS not in log
    assert [m.path for m in service.list_memories(store)] == ["/a.md"]
    assert len(service.list_versions(store).data) == 1
    service.close()


def test_sync_reports_a_refused_file_without_the_secret(
    service: MemoryService, tmp_path: Path
) -> None:
    from mnemofs.sync import SyncWorker

    store = service.create_store("Notes").id
    session = service.create_session([{"memory_store_id": store}], mount_root=str(tmp_path))
    worker = SyncWorker(service, session, tmp_path / "memory")
    worker.reconcile()
    (tmp_path / "memory" / "notes" / "keys.md").write_text(f"a\nb\n{AWS}\n")
    report = worker.reconcile()
    assert any(
        "/keys.md: not uploaded" in e and "AWS Access Key on line 3" in e for e in report.errors
    )
    assert AWS not in "".join(report.errors)
    assert list(service.list_memories(store)) == []


def test_only_what_a_save_adds_is_screened(service: MemoryService) -> None:
    """A credential stored while the store allowed it does not block later edits of that
    memory; a new one in the lines an edit adds is refused, on its own line number."""
    sid = service.create_store("Old", secrets="allow").id
    memory = service.create_memory(sid, "/a.md", f"old {AWS}\n")
    service.update_store(sid, secrets="refuse")
    service.update_memory(sid, memory.id, content=f"old {AWS}\nmore notes\n")
    with pytest.raises(SecretDetected, match="GitHub Token on line 3"):
        service.save_file(sid, "/a.md", f"old {AWS}\nmore notes\n{GITHUB}\n")
    assert service.get_memory(sid, memory.id).content == f"old {AWS}\nmore notes\n"


def test_a_long_lived_writer_loads_the_screen_before_its_first_save(tmp_path: Path) -> None:
    """A mount (``defer_checkpoints``) loads the detectors on a thread of its own at start,
    so its first save does not wait 70-140 ms for them; a one-off process does not load them
    until it screens something. In a fresh interpreter: this one has them loaded already."""
    url = "sqlite:///" + str(tmp_path / "db.sqlite")
    script = f"""
import sys, threading
from mnemofs.store import MemoryService, make_engine
service = MemoryService(make_engine({url!r}), actor="api")
service.create_store("S")
assert "detect_secrets" not in sys.modules, "loaded by a one-off process"
service.defer_checkpoints()
for thread in threading.enumerate():
    if thread.name == "mnemofs-warm-up":
        thread.join()
assert "detect_secrets.plugins.base" in sys.modules
service.close()
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=60)
