"""Every training call is a step source (Contract 3): a trial records the
script's calls (`fit#1`, `fit#2`, ..., with file:line) in `extra["calls"]`,
each the steps from its start to the next call's. Pure: which calls a
configuration is slower in (what a timing trial then times), and which
call a symptom shows in (what the answer names).
"""

from __future__ import annotations

import difflib
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tfrepro.settings import WARMUP_STEPS
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict


@dataclass(frozen=True)
class Call:
    tag: str  # "fit#2"
    where: str  # "train.py:120"
    start: int  # steps before it (0-based index of its first step)
    end: int  # one past its last step

    @property
    def text(self) -> str:
        return f"{self.tag} ({self.where})" if self.where and self.where != "?" else self.tag


def calls_of(result: TrialResult) -> list[Call]:
    """The training calls of a trial, in order, with their step ranges."""
    raw = result.extra.get("calls") or []
    n = max(len(result.step_times), result.steps_run)
    out: list[Call] = []
    for i, c in enumerate(raw):
        try:
            start = int(c["start"])
            end = int(raw[i + 1]["start"]) if i + 1 < len(raw) else n
            out.append(Call(str(c["call"]), str(c.get("where") or ""), start, max(start, end)))
        except (KeyError, TypeError, ValueError):
            return []
    return out


def _call_median(result: TrialResult, tag: str) -> float | None:
    for c in calls_of(result):
        if c.tag == tag:
            times = result.step_times[c.start : c.end]
            steady = times[WARMUP_STEPS:] if len(times) > WARMUP_STEPS + 1 else times[1:]
            return statistics.median(steady) if steady else None
    return None


def per_call_ratios(base: Sequence[TrialResult], failing: Sequence[TrialResult]) -> dict[str, float]:
    """Per call of the failing configuration: its fastest run's typical step
    over the baseline's fastest (calls both ends ran, with steps)."""
    tags = [c.tag for c in calls_of(failing[0])] if failing else []
    out: dict[str, float] = {}
    for tag in tags:
        f = [m for m in (_call_median(t, tag) for t in failing) if m is not None]
        b = [m for m in (_call_median(t, tag) for t in base) if m is not None]
        if f and b and min(b) > 0:
            out[tag] = min(f) / min(b)
    return out


def slower_calls(base: Sequence[TrialResult], failing: Sequence[TrialResult], screen: float) -> tuple[str, ...]:
    """The calls a timing trial should time: those where the failing
    configuration ran at least `screen` times slower than the baseline and
    at least halfway to the slowest call's ratio, in order; () (time the first call, as a single-call script has it) when
    there is one call, none stands out, or only the first does."""
    ratios = per_call_ratios(base, failing)
    if len(ratios) < 2:
        return ()
    # the calls near the slowest one: noise on a loaded machine lifts the others a little
    bar = max(screen, 1 + (max(ratios.values()) - 1) / 2)
    slow = tuple(t for t, r in ratios.items() if r >= bar)
    first = next(iter(ratios))
    return () if slow in ((), (first,)) else slow


def original_line(annotated: str, original: str, line: int) -> int:
    """Line `line` of a zero-edit variant (the user's file with feature
    markers added in memory) as a line of the user's file: the same line
    where it is unchanged, else the first line of the statement it replaces."""
    a, b = annotated.splitlines(), original.splitlines()
    for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i1 < line <= i2 or (i1 == i2 == line - 1):
            return j1 + (line - i1) if tag == "equal" else j1 + 1
    return line


def where_mapper(texts: Mapping[str, tuple[str, str]]) -> Callable[[str], str]:
    """file:line of a variant -> of the user's file, for the files whose
    variant text differs from the file (relpath -> (variant, original))."""

    def map_where(where: str) -> str:
        rel, _, num = where.rpartition(":")
        if rel in texts and num.isdigit():
            return f"{rel}:{original_line(*texts[rel], int(num))}"
        return where

    return map_where


def symptom_call(
    result: TrialResult | None,
    symptom: Verdict | None,
    timed: Sequence[str] = (),
    where: Callable[[str], str] = str,
) -> str | None:
    """Where the symptom shows, as the answer names it: the call of the first
    non-finite loss for a NaN, the calls timed for a slowdown (the first call
    when none was chosen); None for a single-call script or no call seen."""
    if result is None or symptom is None:
        return None
    calls = [replace(c, where=where(c.where)) for c in calls_of(result)]
    if len(calls) < 2:
        return None
    if symptom is Verdict.NAN and result.first_nonfinite_step is not None:
        step = result.first_nonfinite_step
        return next((c.text for c in calls if c.start < step <= c.end), None)
    if symptom is Verdict.SLOWDOWN:
        wanted = list(timed) or [calls[0].tag]
        return ", ".join(c.text for c in calls if c.tag in wanted) or None
    return None
