"""A custom loop against fit, step by step (pure): the first steps where the
loop's loss leaves fit's, for the ISSUE.md log of a `custom_loop` culprit
(repro.py keeps the loop, reference.py is fit built from its parts)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tfrepro.report.textfmt import fmt

ROWS = 6


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return abs(a - b) / max(abs(b), 1e-12)


def first_diverging_rows(loop: Sequence[float | None], fit: Sequence[float | None], tol: float) -> list[str]:
    """A plain-text table: the first step, then the first steps off by more than `tol`."""
    n = min(len(loop), len(fit))
    if n == 0:
        return []
    off = [i for i in range(n) if (_rel(loop[i], fit[i]) is None) or _rel(loop[i], fit[i]) > tol]
    if not off:
        return [f"custom loop (repro.py) and fit (reference.py) agree within {fmt(tol)} over {n} steps"]
    shown = sorted({0, *off[:ROWS]})
    lines = [
        f"first diverging steps, custom loop (repro.py) against fit (reference.py), tolerance {fmt(tol)}:",
        f"{'step':>6}  {'loop':>12}  {'fit':>12}  {'relative':>9}",
    ]
    for i in shown:
        rel = _rel(loop[i], fit[i])
        cells = ["NaN" if v is None or not math.isfinite(v) else fmt(v) for v in (loop[i], fit[i])]
        lines.append(f"{i + 1:>6}  {cells[0]:>12}  {cells[1]:>12}  {'-' if rel is None else fmt(rel):>9}")
    return lines
