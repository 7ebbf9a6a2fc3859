"""Bisection over an ordered range of commits, with skips (PURE: no I/O).

The search knows only *a sequence and a test*: `items[0]` is the good end,
`items[-1]` the bad end, and `test(round) -> marks` says whether each item
of a round is good, bad or cannot be judged (skip, as `git bisect skip`). The git edge
(`commits.py`) supplies the commits and a test that runs a trial; the tests
supply lambdas.

Invariants (for a monotone range: good up to some index, bad from there on):

- The ends are judged by the caller before the search (`ranges.check_ends`:
  a good end that fails or a bad end that does not is the run's answer,
  with its reason); the search tests them first all the same (`test` gives
  their known marks back) and refuses ends that are not good and bad
  (ValueError: a caller's bug, not a status).
- At every point `items[lo]` tested good, `items[hi]` tested bad (or is the
  bad end), and the first bad item lies in `items[lo+1 : hi+1]`.
- The next item tried is the median of the *untried* items strictly between
  `lo` and `hi`, so each good/bad answer at least halves them: good/bad
  tests after the ends are at most ceil(log2(len(items) - 1)); every skip
  costs one more test and never more.
- The result never guesses: when only skipped items remain between `lo` and
  `hi`, `first_bad` is None and `candidates` lists `items[lo+1 : hi+1]`
  (each of them may be the first bad one), in range order.
- Each item is tested at most once.

`judge` is the commit-mode test's pure half: a trial's symptoms -> a Mark,
locked onto the hunted symptom.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from tfrepro.verdicts import STOPPERS, Verdict

T = TypeVar("T")


class Mark(str, Enum):
    """What one tried item says about the range."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


@dataclass(frozen=True)
class RangeResult(Generic[T]):
    """The outcome of `bisect_range`.

    `status`: "found" (`first_bad` set) or "ambiguous" (`candidates` set:
    skips hide which of them is the first bad one).
    """

    status: str
    first_bad: T | None
    candidates: tuple[T, ...]


def _untried(lo: int, hi: int, skipped: set[int], width: int) -> list[int]:
    """Up to `width` untried indices strictly between lo and hi, evenly spaced
    (width 1: the lower median, which keeps the choice deterministic and
    splits the candidates in halves of equal likelihood)."""
    inner = [i for i in range(lo + 1, hi) if i not in skipped]
    if len(inner) <= width:
        return inner
    n = len(inner)
    return sorted({inner[((k + 1) * (n + 1)) // (width + 1) - 1] for k in range(width)})


def bisect_range(items: Sequence[T], test: Callable[[list[T]], list[Mark]], *, width: int = 1) -> RangeResult[T]:
    """Find the first bad item of `items` (good end first, bad end last).

    `test` gets the items of a round (the ends, then up to `width` k items:
    k-ary bisection, each round divides the candidates by k + 1) and returns
    their marks in order; each item is tried once, see the module docstring
    for the invariants and the bound on the number of tries.
    """
    if len(items) < 2:
        raise ValueError("a range needs a good end and a bad end (two items at least)")

    def run(indices: list[int]) -> list[Mark]:
        return [Mark(m) for m in test([items[i] for i in indices])]

    if run([0, len(items) - 1]) != [Mark.GOOD, Mark.BAD]:
        raise ValueError("the ends must be judged good and bad before the search (ranges.check_ends)")

    lo, hi = 0, len(items) - 1
    skipped: set[int] = set()
    while points := _untried(lo, hi, skipped, max(1, width)):
        marks = dict(zip(points, run(points)))
        skipped.update(i for i, m in marks.items() if m is Mark.SKIP)
        hi = min([i for i, m in marks.items() if m is Mark.BAD] + [hi])
        lo = max([i for i, m in marks.items() if m is Mark.GOOD and i < hi] + [lo])

    if hi - lo == 1:
        return RangeResult("found", items[hi], ())
    return RangeResult("ambiguous", None, tuple(items[lo + 1 : hi + 1]))


# --------------------------------------------------------------------------- commits


def exception_type(error: str | None) -> str | None:
    """`"ValueError: bad shape"` -> `"ValueError"` (the last traceback line)."""
    m = re.match(r"\s*([A-Za-z_][\w.]*)\s*(?::|$)", error or "")
    return m.group(1).rsplit(".", 1)[-1] if m else None


def judge(
    shown: frozenset[Verdict],
    target: Verdict,
    *,
    error: str | None = None,
    bad_error: str | None = None,
) -> tuple[Mark, str | None]:
    """One commit's symptoms -> good / bad / skip (with a reason), locked onto `target`.

    Bad: the hunted symptom shows (a crash only when it is the same exception
    type as the bad end's: a commit with a syntax error is not "the" crash).
    Skip: the trial stopped on something else (a crash while hunting a NaN,
    a NaN while hunting a mismatch), so it says nothing about the target.
    Good: otherwise (e.g. a mismatch while hunting a NaN: the run went through).
    """
    if target is Verdict.CRASH and Verdict.CRASH in shown:
        got, want = exception_type(error), exception_type(bad_error)
        if got == want:
            return Mark.BAD, None
        return Mark.SKIP, f"a different crash ({error or 'no traceback'}) than the bad end's ({want})"
    if target in shown:
        return Mark.BAD, None
    stopped = sorted(v.value for v in shown & STOPPERS)
    if stopped:
        reason = f"{'/'.join(stopped)} while hunting {target.value}"
        return Mark.SKIP, f"{reason}: {error}" if error else reason
    return Mark.GOOD, None
