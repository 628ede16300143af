"""scripts/bench's arithmetic: a peer's failed calls do not count as work done, and a ratio
against a mount that failed calls in a phase says so."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
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


def test_the_store_calls_run_every_phase_a_mount_answers_with_one(
    bench: ModuleType, tmp_path: Path
) -> None:
    """The ``store`` column: the phases that are one store call each, made in this process on
    a database of its own, leaving the store as a mount's round leaves it (empty); the others
    are not measured."""
    b = bench.Bench(tmp_path)
    try:
        target = b.store_calls("store", str(tmp_path / "store.sqlite"))
        phases = target.workload(0, 40, bench.Texts(False))
        mount_phases = bench.workload(tmp_path / "round1", 40, target, bench.Texts(False))
        assert [name for name, _ in phases] == [name for name, _ in mount_phases]
        rates = {name: run() for name, run in phases}
        one_call = {"mkdir", "create+write+close", "overwrite 2 KiB", "append a line"}
        one_call |= {"rename", "delete", "rmdir"}
        assert {name for name, rate in rates.items() if rate > 0} == one_call
        assert all(math.isnan(rate) for name, rate in rates.items() if name not in one_call)
        service, store = target.service, target.store_id
        kinds = Counter(c.version.operation for c in service.changes(store, 0, limit=1000))
        assert kinds == {"created": 40, "modified": 120, "deleted": 40}  # 2 saves, a rename
        assert service.get_store(store).memory_count == 0
        assert service.explicit_directories(store) == []
    finally:
        b.close()


def test_the_floors_split_a_change_and_bound_its_ratios(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per call: the mount's time, its store call's, the rest; the best ratio to bindfs and
    rclone if the rest cost bindfs's whole call, and PostgreSQL's if its rest cost SQLite's."""
    rates = {  # ops/s; "stat" is no store call
        "bindfs": (10_000.0, 50_000.0),
        "rclone": (4_000.0, 9_000.0),
        "mnemofs": (2_000.0, 40_000.0),
        "store": (5_000.0, math.nan),
        "mnemofs-pg": (1_000.0, 30_000.0),
        "store-pg": (2_500.0, math.nan),
    }
    targets = []
    for name, (create, stat) in rates.items():
        t = bench.Target(name, tmp_path)
        t.runs = [{"create": create, "stat": stat}] * 3
        targets.append(t)
    bench.floors(targets)
    out = capsys.readouterr().out.splitlines()
    header = out[-2].split()
    assert header[:7] == [
        "phase",
        "mnemofs",
        "store",
        "rest",
        "bindfs",
        "best/bindfs",
        "best/rclone",
    ]
    assert out[-1].split() == [
        "create",
        "500",
        "200",
        "300",
        "100",
        "0.33",
        "0.83",
        "1,000",
        "400",
        "600",
        "0.71",
    ]
    assert not any(line.startswith("stat") for line in out)


def test_the_store_calls_are_not_a_mount_for_the_other_benchmarks(
    bench: ModuleType, tmp_path: Path
) -> None:
    """scripts/bench-bursts times every target ``standard`` gives through its folder: the store
    column is scripts/bench's own."""
    assert bench.Bench(tmp_path).standard(lambda name: name == "store", None) == []


@pytest.fixture(scope="module")
def aims() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mnemofs_bench_aims", BENCH.parent / "bench_aims.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_aim_shows_its_rounds_range_and_how_many_met_it(aims: ModuleType) -> None:
    """A median can fall either side of an aim from run to run: the verdict says how many
    rounds met it, with their range, from each round's own ratio."""
    phases = ["create+write+close", "rename", "stat"]

    def rounds(*per_round: tuple[float, float, float]) -> list[dict[str, float]]:
        return [dict(zip(phases, rates, strict=True)) for rates in per_round]

    runs = {
        "mnemofs": rounds((600, 400, 9000), (450, 400, 9000), (550, 400, 9000)),
        "bindfs": rounds((1000, 1000, 10_000), (1000, 1000, 10_000), (1000, 1000, 10_000)),
        "rclone": rounds((500, 500, 9000), (500, 300, 9000), (500, 500, 9000)),
        "mnemofs-pg": rounds((420, 300, 9000), (300, 300, 9000), (400, 300, 9000)),
    }
    lines = aims.verdict(runs, {"bindfs": {"rename": 2}})
    assert lines[1].split() == ["aim", "median", "rounds", "met"]
    rows = {line.split("  ")[0]: line.split("  ")[1:] for line in lines[2:]}
    cells = {label: [c.strip() for c in rest if c.strip()] for label, rest in rows.items()}
    assert cells["create+write+close >= 0.5x bindfs"] == ["0.55", "0.45-0.60", "2 of 3"]
    assert cells["rename >= 0.4x bindfs"] == ["0.40", "0.40-0.40", "3 of 3", "*"]  # failed calls
    assert cells["stat >= 0.9x bindfs"] == ["0.90", "0.90-0.90", "3 of 3"]
    # every phase against rclone: each round's lowest ratio, and the phase of the lowest median
    assert cells["every phase >= 1x rclone"] == [
        "0.80",
        "0.80-0.90",
        "0 of 3",
        "lowest phase: rename, median 0.80",
    ]
    # PostgreSQL: each save phase the mounts ran, against the SQLite mount's
    assert cells["PostgreSQL create+write+close >= 0.7x"] == ["0.70", "0.67-0.73", "2 of 3"]
    assert len(rows) == 1 + 3 + 1  # no sed -i phase, no mnemofs-full: no rows for them
    assert aims.verdict({"mnemofs": runs["mnemofs"]}) == []


def test_a_round_where_the_peer_did_nothing_is_left_out_of_its_aim(aims: ModuleType) -> None:
    """rclone can fail every call of a phase in a round (0 ops/s): that round has no ratio
    there, and the others still count, in that phase's row and in "every phase"."""

    def rounds(*rates: tuple[float, float]) -> list[dict[str, float]]:
        return [{"stat": stat, "read": read} for stat, read in rates]

    runs = {
        "mnemofs": rounds((900, 500), (900, 500), (900, 500)),
        "bindfs": rounds((1000, 500), (0, 500), (1000, 500)),
        "rclone": rounds((900, 1000), (900, 0), (900, 250)),
    }
    lines = aims.verdict(runs)
    rows = {line.split("  ")[0]: line.split("  ")[1:] for line in lines[2:]}
    cells = {label: [c.strip() for c in rest if c.strip()] for label, rest in rows.items()}
    assert cells["stat >= 0.9x bindfs"] == ["0.90", "0.90-0.90", "2 of 2"]
    # each round's lowest: 0.5 (read), 1.0 (stat; read has none), 1.0 (stat)
    assert cells["every phase >= 1x rclone"][:3] == ["1.00", "0.50-1.00", "2 of 3"]
