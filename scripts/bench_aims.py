"""Issue 17's aims, judged round by round from a ``scripts/bench`` run (``verdict``).

A ratio's median over three or five rounds can land on either side of its aim from one run to
the next on this kind of machine (two vCPUs shared with other guests): the same code has
measured rename at 0.38 and 0.67 of bindfs on one day. So each aim is shown with the range of
its rounds' own ratios and how many rounds met it: an aim met in every round is met; one met in
some is within this run's noise; one met in none is not met. Only the aims whose targets ran are
shown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

Runs = Mapping[str, Sequence[Mapping[str, float]]]  # target: its rounds' ops/s by phase

# (phase, least ratio to bindfs)
BINDFS = [
    ("create+write+close", 0.5),
    ("rename", 0.4),
    ("delete", 0.5),
    ("overwrite 2 KiB", 0.5),
    ("append a line", 0.5),
    ("sed -i", 0.7),
    ("stat", 0.9),
    ("read", 0.8),
]
# The phases that save a file: PostgreSQL's aim is ``PG_SAVES`` of SQLite's on each.
SAVES = [
    "create+write+close",
    "overwrite 2 KiB",
    "append a line",
    "sed -i",
    "temp + os.replace",
    "sh -c 'echo >> f'",
]
RCLONE, FULL, PG_SAVES = 1.0, 0.8, 0.7


def _rounds(runs: Runs, a: str, b: str, phase: str) -> list[float]:
    """Each round's a/b in ``phase``; ``nan`` for a round where b did nothing (every call
    failed), so the rounds of different phases stay aligned."""
    return [
        x[phase] / y[phase] if y[phase] else math.nan for x, y in zip(runs[a], runs[b], strict=True)
    ]


def _median(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan


def _row(label: str, rounds: Sequence[float], aim: float, note: str = "") -> tuple[str, ...]:
    known = [r for r in rounds if not math.isnan(r)]
    met = sum(r >= aim for r in known)
    spread = f"{min(known):.2f}-{max(known):.2f}" if known else "-"
    return (label, f"{_median(known):.2f}", spread, f"{met} of {len(known)}", note)


def _every_phase(runs: Runs, a: str, b: str, aim: float, label: str) -> tuple[str, ...]:
    """One row for "every phase": each round's lowest ratio over the phases (the median and
    the range of those), and the phase whose median ratio is lowest."""
    phases = [p for p in runs[a][0] if not math.isnan(runs[a][0][p])]
    per_phase = {p: _rounds(runs, a, b, p) for p in phases}
    lowest = min(phases, key=lambda p: _median(per_phase[p]))
    by_round = [_lowest([rounds[i] for rounds in per_phase.values()]) for i in range(len(runs[a]))]
    return _row(
        label, by_round, aim, f"lowest phase: {lowest}, median {_median(per_phase[lowest]):.2f}"
    )


def _lowest(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return min(known) if known else math.nan


def verdict(runs: Runs, failed: Mapping[str, Mapping[str, int]] | None = None) -> list[str]:
    """The aims' table, one line each (empty when no aim's targets ran). ``failed``: each
    target's failed calls by phase; a phase where either side failed some is marked ``*``."""
    failed = failed or {}

    def mark(a: str, b: str, phase: str) -> str:
        return "*" if failed.get(a, {}).get(phase) or failed.get(b, {}).get(phase) else ""

    rows: list[tuple[str, ...]] = []
    if {"mnemofs", "rclone"} <= runs.keys():
        rows.append(_every_phase(runs, "mnemofs", "rclone", RCLONE, "every phase >= 1x rclone"))
    if {"mnemofs", "bindfs"} <= runs.keys():
        for phase, aim in BINDFS:
            if phase not in runs["mnemofs"][0]:
                continue
            rounds = _rounds(runs, "mnemofs", "bindfs", phase)
            rows.append(
                _row(f"{phase} >= {aim}x bindfs", rounds, aim, mark("mnemofs", "bindfs", phase))
            )
    if {"mnemofs", "mnemofs-full"} <= runs.keys():
        rows.append(
            _every_phase(
                runs, "mnemofs-full", "mnemofs", FULL, f"full store, every phase >= {FULL}x"
            )
        )
    if {"mnemofs", "mnemofs-pg"} <= runs.keys():
        for phase in SAVES:
            if phase not in runs["mnemofs"][0]:
                continue
            rounds = _rounds(runs, "mnemofs-pg", "mnemofs", phase)
            label, note = f"PostgreSQL {phase} >= {PG_SAVES}x", mark("mnemofs-pg", "mnemofs", phase)
            rows.append(_row(label, rounds, PG_SAVES, note))
    if not rows:
        return []
    header = ("aim", "median", "rounds", "met", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = [
        "Issue 17's aims, round by round (the median of the rounds' own ratios, their range, "
        "and how many rounds met the aim)"
    ]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:4], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells + ([row[4]] if row[4] else [])).rstrip())
    return lines
