"""scripts/bench's arithmetic: a peer's failed calls do not count as work done, and a ratio
against a mount that failed calls in a phase says so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mnemofs_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_phase_counts_only_the_calls_that_succeeded(bench: ModuleType, tmp_path: Path) -> None:
    """rclone's rmdir of a folder it is still uploading into fails at once with EIO: counted
    as done, its rmdirs looked faster than every mount that removed its folders."""
    target = bench.Target("peer", tmp_path)
    phases = dict(bench.workload(tmp_path / "round1", 40, target, bench.Texts(False)))
    assert phases["mkdir"]() > 0
    (tmp_path / "round1" / "d00" / "keep").write_text("still uploading")  # d00 stays
    rate = phases["rmdir"]()
    assert target.failed == {"rmdir": 1}
    assert len(target.errors) == 1
    assert "rmdir d00" in target.errors[0]
    assert rate > 0
    assert not (tmp_path / "round1" / "d01").exists()  # the phase went on past the failure
    assert phases["rmdir"]() == 0  # again: nothing left to remove but d00, which stays
    assert target.failed == {"rmdir": 41}


def test_a_ratio_against_a_mount_that_failed_calls_is_marked(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mnemofs = bench.Target("mnemofs", tmp_path)
    rclone = bench.Target("rclone", tmp_path)
    for t, rate in ((mnemofs, 100.0), (rclone, 200.0)):
        t.runs = [{"mkdir": rate, "rmdir": rate}, {"mkdir": rate, "rmdir": rate}]
    rclone.failed["rmdir"] = 40
    bench.report([rclone, mnemofs], 2, 2000, bench.Texts(False))
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["mkdir"][-1] == "0.50"
    assert rows["rmdir"][-1] == "0.50*"
    assert "* rclone failed 40 rmdir calls" in out
