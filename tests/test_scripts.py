"""Every script in ``scripts/`` sets itself up: run from a clean environment (no venv on PATH,
nothing but the system's PATH and HOME), its ``--help`` works. A new user runs them so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
COMMANDS = sorted(p.name for p in SCRIPTS.iterdir() if p.is_file() and os.access(p, os.X_OK))


def test_every_command_is_a_setting_up_wrapper() -> None:
    assert {"run", "test", "bench", "bench-store", "bench-shared", "bench-sync", "soak"} <= set(
        COMMANDS
    )
    for name in COMMANDS:
        assert (SCRIPTS / name).read_text().startswith("#!/usr/bin/env bash\n"), name
        assert "_setup.sh" in (SCRIPTS / name).read_text(), name


@pytest.mark.parametrize("name", COMMANDS)
def test_help_from_a_clean_environment(name: str, tmp_path: Path) -> None:
    clean = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
    }
    done = subprocess.run(
        [str(SCRIPTS / name), "--help"],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stdout.strip(), done.stderr[-2000:]


@pytest.mark.parametrize(
    ("args", "env_url", "starts"),
    [
        (["--pg"], "", True),
        (["--repeat", "3", "--pg", "--files", "10"], "", True),
        (["--pg", "postgresql://mnemofs@/db?host=/tmp/x"], "", False),  # the caller's server
        (["--pg=postgresql://mnemofs@/db"], "", False),
        (["--files", "10"], "", False),
        (["--pg"], "postgresql://mnemofs@/db", False),  # $MNEMOFS_TEST_PG_URL names one
    ],
)
def test_a_benchmark_starts_its_own_postgresql_only_when_given_none(
    args: list[str], env_url: str, starts: bool
) -> None:
    """scripts/bench and scripts/bench-bursts start a throwaway cluster for a bare ``--pg``;
    ``--pg URL`` once started one too, which sat beside the run unused."""
    done = subprocess.run(
        ["bash", "-c", '. "$0"; wants_throwaway_pg "$@"', str(SCRIPTS / "_setup.sh"), *args],
        env={**os.environ, "MNEMOFS_TEST_PG_URL": env_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == (0 if starts else 1), done.stderr
