"""A short run of ``scripts/soak`` on each backend, locally and through a server: a busy mount,
grep and CLI loops and a sync worker on one store, with a verdict on the WAL, the daemon's (and
server's) memory and descriptors, errors and folder-vs-store convergence (the full run is
``scripts/soak 600``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import pg_url
from .mounted import require_fuse

pytestmark = pytest.mark.mounted

SOAK = Path(__file__).parent.parent / "scripts" / "soak.py"


@pytest.mark.parametrize("where", ["local", "remote"])
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_short_soak_passes(backend: str, where: str) -> None:
    """``remote``: the sandbox's deployment, the mount and the sync worker holding only
    session tokens, through ``mnemofs serve``."""
    require_fuse()
    argv = [sys.executable, str(SOAK), "20", "--every", "5"]
    if where == "remote":
        argv.append("--remote")
    env = dict(os.environ)
    if backend == "postgres":
        env["MNEMOFS_TEST_PG_URL"] = pg_url()
        argv.append("--postgres")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "verdict: PASS" in done.stdout
