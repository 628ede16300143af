"""Bursts of saves after pauses, as agents write (run through scripts/bench-bursts).

scripts/bench times sustained phases of thousands of calls; an agent saves a few files, thinks
for seconds, saves a few more. What that costs is mostly the first saves after the pause: a
cold CPU, and for a database on a disk whatever the pause left to sync. Each round, on every
target in turn (the order alternates round by round): a pause of ``--pause`` seconds (longer
than a mount's checkpoint interval), then ``--burst`` creates of new 4 KiB files, each timed;
another pause, then a line appended to each of those files, each timed. Printed per target and
burst: the medians over the rounds of the first save, the second, the rest (the median of their
medians) and the whole burst; then each mnemofs target's burst against bindfs's and rclone's
and, with ``--against REV``, the same mount on that revision's code against this one.

Targets: bindfs and rclone (as in scripts/bench), a mnemofs mount of a fresh SQLite database,
``--against REV`` that mount on another revision's code, ``--pg [URL]`` a mount on PostgreSQL
(and its baseline). Everything lives under ``--dir`` (default: the system's temporary folder,
a disk on most machines, where a SQLite database usually is too; scripts/bench uses tmpfs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Bench, Target

BLOCK = b"x" * 4096
LINE = b"a line appended\n"
KINDS = ("create", "append")


def burst(folder: Path, kind: str, count: int) -> list[float]:
    """``count`` saves of ``kind`` in ``folder``, each timed (seconds)."""
    times = []
    for i in range(count):
        path = folder / f"f{i:03d}.md"
        start = time.perf_counter()
        if kind == "create":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, BLOCK)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.write(fd, LINE)
        os.close(fd)
        times.append(time.perf_counter() - start)
    return times


def run(
    targets: list[Target], rounds: int, pause: float, count: int
) -> dict[str, list[list[float]]]:
    """Every round's bursts: ``{f"{target} {kind}": [times of round 1, ...]}``."""
    seen: dict[str, list[list[float]]] = {f"{t.name} {k}": [] for t in targets for k in KINDS}
    for round_no in range(rounds):
        order = targets if round_no % 2 == 0 else targets[::-1]
        for target in order:
            folder = target.path / f"round{round_no}"
            folder.mkdir()
            for kind in KINDS:
                time.sleep(pause)
                seen[f"{target.name} {kind}"].append(burst(folder, kind, count))
        print(f"round {round_no + 1} of {rounds} done", file=sys.stderr)
    return seen


def report(seen: dict[str, list[list[float]]], targets: list[Target]) -> None:
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:8.2f}"

    print(f"{'target':<24}{'first':>8}{'second':>8}{'rest':>8}{'burst':>8}   (ms, medians)")
    totals: dict[str, list[float]] = {}
    for name, runs in seen.items():
        rest = [statistics.median(r[2:]) for r in runs if len(r) > 2] or [0.0]
        totals[name] = [sum(r) for r in runs]
        first, second = [r[0] for r in runs], [r[min(1, len(r) - 1)] for r in runs]
        print(f"{name:<24}{ms(first)}{ms(second)}{ms(rest)}{ms(totals[name])}")
    names = {t.name for t in targets}
    for kind in KINDS:
        for mine in sorted(n for n in names if n.startswith("mnemofs")):
            for peer in ("bindfs", "rclone", mine.replace("mnemofs", "baseline")):
                if peer not in names:
                    continue
                pairs = zip(totals[f"{mine} {kind}"], totals[f"{peer} {kind}"], strict=True)
                ratios = [b / a for a, b in pairs]
                print(
                    f"{kind} bursts, {mine} against {peer}: {statistics.median(ratios):.2f} "
                    "(the peer's time over mnemofs's, median of the rounds' own ratios)"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pause", type=float, default=1.5, help="seconds before each burst")
    parser.add_argument("--burst", type=int, default=8, help="saves in a burst")
    parser.add_argument("--pg", nargs="?", const="", default=None, metavar="URL")
    parser.add_argument("--against", metavar="REV", help="also mount git revision REV's code")
    parser.add_argument("--only", default="", help="comma-separated targets (default: all)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where everything lives")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    want = lambda name: not only or name in only  # noqa: E731
    work = Path(tempfile.mkdtemp(prefix="mnemofs-bursts-", dir=args.dir))
    bench = Bench(work)
    try:
        targets: list[Target] = []
        targets += bench.standard(want, args.against)
        if args.pg is not None:
            url = args.pg or os.environ.get("MNEMOFS_TEST_PG_URL", "")
            if not url:
                raise SystemExit("--pg needs a URL or $MNEMOFS_TEST_PG_URL")
            if want("mnemofs-pg"):
                targets.append(bench.mnemofs("mnemofs-pg", url)[0])
            if args.against and want("baseline-pg"):
                code = bench.code_of(args.against)
                targets.append(bench.mnemofs("baseline-pg", url, code=code)[0])
        print(
            f"{args.rounds} rounds; bursts of {args.burst} saves after {args.pause} s pauses; "
            f"in {work}"
        )
        report(run(targets, args.rounds, args.pause, args.burst), targets)
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
