"""The house's rules, checked (STYLE.md, issue 13): small rooms, arrows one way."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "mnemofs"
IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.M)


def imports_of(path: Path) -> set[str]:
    return set(IMPORT.findall(path.read_text()))


def test_no_room_is_too_wide() -> None:
    wide = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert wide == {}


def test_arrows_point_one_way() -> None:
    for path in SRC.rglob("*.py"):
        names = imports_of(path)
        where = path.relative_to(SRC).parts
        if where[0] != "fs":
            assert not any(n.startswith("pyfuse3") for n in names), path
        if where[0] == "store":
            assert not any(n.split(".")[0] in ("pyfuse3", "trio") for n in names), path
            assert not any(
                n.startswith(("mnemofs.fs", "mnemofs.cli", "mnemofs.sync")) for n in names
            ), path
        if where[0] == "fs":
            assert not any(n.startswith(("mnemofs.cli", "mnemofs.sync")) for n in names), path
        if where[0] == "fs" or path.name in ("sync.py", "remote.py", "remotewire.py", "backend.py"):
            # a mount and a sync worker reach memories only through backend.Backend
            assert not any(n.startswith("mnemofs.store") for n in names), path
        web = ("fastapi", "starlette", "uvicorn", "pydantic")
        if where[0] != "http":
            assert not any(n.split(".")[0] in web for n in names), path
            assert not any(n.startswith("mnemofs.http") for n in names) or where[0] == "cli", path
        else:
            assert not any(n.split(".")[0] in ("pyfuse3", "trio") for n in names), path
            assert not any(
                n.startswith(("mnemofs.fs", "mnemofs.cli", "mnemofs.sync")) for n in names
            )


def test_commands_other_than_serve_never_load_the_web_stack() -> None:
    code = (
        "import sys; from mnemofs.cli import main\n"
        "try: main(['stores', '--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_umount_and_other_commands_never_load_fuse() -> None:
    code = (
        "import sys; from mnemofs.cli import main\n"
        "try: main(['umount', '--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('pyfuse3', 'trio') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
