"""`also_seen`: every symptom the failing configuration showed besides the
one hunted (Contract 3), so a user who came for another symptom is told how
to hunt it. Pure: the engine passes what its trials showed."""

from __future__ import annotations

from collections.abc import Iterable

from tfrepro.trials.values import AlsoSeen
from tfrepro.verdicts import STOPPERS, SYMPTOM_ORDER, Verdict


def also_seen(
    shown: Iterable[Verdict],
    target: Verdict | None,
    *,
    ratio: float | None,
    slowdown: float,
) -> list[AlsoSeen]:
    """The symptoms in `shown` other than `target`, in the hunting order, and
    a possible slowdown when `ratio` (the fastest failing run over the
    fastest baseline run, `Ends.untimed_ratio`) is at least halfway to the
    `slowdown` threshold (an untimed, cheap comparison: the hint says to hunt
    it with timing trials)."""
    shown = set(shown)
    out = [
        AlsoSeen(v.value, f"rerun with --symptom {v.value}")
        for v in SYMPTOM_ORDER
        if v in shown and v != target and v != Verdict.SLOWDOWN
    ]
    if target != Verdict.SLOWDOWN and not shown & STOPPERS and ratio and ratio >= 1 + (slowdown - 1) / 2:
        r = round(ratio, 2)
        out.append(AlsoSeen("slowdown", f"possible slowdown x{r:g} (untimed runs): rerun with --symptom slowdown", r))
    return out
