"""What a trial shows (`Verdict`) and the order symptoms are picked in.

The one source for the trial values (`trials/values.py`), the classifier and
the searches, and for the CLI's `--symptom` choices: standard library only,
so the CLI reads it at start-up without importing `trials/`.
"""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    """What a trial shows, relative to its baseline/reference."""

    OK = "ok"
    NAN = "nan"
    CRASH = "crash"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    MISMATCH = "mismatch"
    SLOWDOWN = "slowdown"
    # The trial could not be judged for the symptom hunted (commit bisection's
    # "skip", an executor that lost its worker twice). Never blames a feature.
    UNTESTABLE = "untestable"


# The order in which `bisect` without --symptom picks the symptom to hunt
# (and the order `--symptom` lists its choices in): Verdict's own, from NAN to SLOWDOWN.
SYMPTOM_ORDER: tuple[Verdict, ...] = tuple(v for v in Verdict if v not in (Verdict.OK, Verdict.UNTESTABLE))
# Verdicts after which a trial stopped early (a NaN stops training, a crash or
# timeout ends it): it cannot tell whether another symptom would have shown
# later. Range modes skip such a point unless it is the symptom hunted; feature
# mode treats them as the failures (the baseline's, the timing trial's, the one-run replay's).
STOPPERS = frozenset({Verdict.NAN, Verdict.CRASH, Verdict.TIMEOUT})
