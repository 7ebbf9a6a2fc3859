"""Timing comparisons for a slowdown hunt: one pool of baseline timing trials
shared by every candidate, and the evidence gathered per candidate.

Each candidate trial runs between the pool's latest baseline trial and a
fresh one (B C B C B ...), so one baseline trial serves the candidates on
both sides of it; `timed` adds pairs to a candidate's evidence until
`slowdown.sequential_slowdown` decides over all of it (a later look, e.g.
the replay, continues the evidence instead of starting over). Runs nothing
itself: the caller injects `trial(key, repeat, role)` (one timing trial,
alone) and `failure(key, result)` (the nan/crash/timeout verdict that stops
timing). A key names what is timed: a feature configuration (the engine;
the baseline is every feature off, `frozenset()`), a point of a range
(ranges.py; the baseline is the good end) or the report's repro.py against
its reference.py (report/rerun.py). A baseline trial that `stopped`
rejects (it could not run, timed out, crashed or went non-finite within
`steps`) makes the pair untestable before its candidate runs; `why` keeps
the reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Generic, TypeVar

from tfrepro.trials import classify, slowdown
from tfrepro.trials.trial import Purpose
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

# Repeat-index bases: far apart so that no two roles ever share a cache entry.
# The k-th timing trial of a candidate (baseline: of the pool) is base + k,
# and a run asks for them in a deterministic order, so a resumed bisect gets
# every finished one from the cache.
TIMING_CANDIDATE = 100
TIMING_BASELINE = 10_000

K = TypeVar("K", bound=Hashable)


class TimingPool(Generic[K]):
    def __init__(
        self,
        trial: Callable[[K, int, str], TrialResult],
        failure: Callable[[K, TrialResult], Verdict],
        threshold: float,
        baseline: K = frozenset(),
        *,
        steps: int,
        name: str = "the baseline's timing run",
    ) -> None:
        """`steps`: the steps a trial of the hunt runs (a timing trial runs
        on past them); `name`: the baseline trial, as `why` names it."""
        self.trial, self.failure, self.threshold, self.baseline = trial, failure, threshold, baseline
        self.steps, self.name = steps, name
        self.pool: list[TrialResult] = []  # baseline timing trials, in the order run
        self.pairs: dict[K, list[slowdown.TimingPair]] = {}  # the evidence per candidate
        self.outcomes: dict[K, list[slowdown.TimingOutcome]] = {}
        self.why: list[str] = []  # why a pair could not be timed, in order

    def _baseline(self, fresh: bool) -> TrialResult | None:
        """The pool's latest baseline trial (`fresh`, or none yet: a new one); None when `stopped` rejects it."""
        if fresh or not self.pool:
            self.pool.append(self.trial(self.baseline, TIMING_BASELINE + len(self.pool), Purpose.TIMING_BASELINE))
        stop = stopped(self.pool[-1], self.steps)
        if stop is not None:
            self.why.append(f"{self.name} stopped with {stop.value}")
        return None if stop is not None else self.pool[-1]

    def timed(
        self,
        key: K,
        policy: slowdown.SequentialPolicy = slowdown.SequentialPolicy(max_samples=16),
        *,
        at_least: float = 0.0,
    ) -> slowdown.TimingOutcome:
        """New pairs of `key` (at least `policy.min_new`, at most its
        `max_samples`) added to its evidence, decided over all of it by
        `policy`; `at_least`: a "slower" decision whose ratio is under it is
        taken as not slower (a search's subset that does not explain the
        slowdown it looks for)."""
        evidence = self.pairs.setdefault(key, [])

        def pair(i: int):
            before = self._baseline(fresh=False)
            if before is None:
                return Verdict.UNTESTABLE
            c = self.trial(key, TIMING_CANDIDATE + len(evidence), Purpose.TIMING)
            stop = self.failure(key, c)
            if stop != Verdict.OK:
                return stop
            after = self._baseline(fresh=True)
            if after is None:
                return Verdict.UNTESTABLE
            got = slowdown.timing_pair(before, c, after)
            if got is None:
                self.why.append("fewer than 2 steps past the warm-up")
                return Verdict.UNTESTABLE
            evidence.append(got)
            return got

        policy = replace(policy, max_samples=max(policy.max_samples, policy.min_new))
        got = slowdown.sequential_slowdown(pair, self.threshold, policy, prior=tuple(evidence))
        if got.verdict == Verdict.SLOWDOWN and got.ratio is not None and got.ratio < at_least:
            got = replace(got, verdict=Verdict.OK)
        self.outcomes.setdefault(key, []).append(got)
        return got


def stopped(result: TrialResult, steps: int) -> Verdict | None:
    """The verdict that keeps a timing trial from being timed (either side
    of a pair), else None: it could not run, timed out, crashed, or went
    non-finite within `steps`. A timing trial runs on past `steps` (its time
    budget); a NaN after them is not the symptom a hunt looks for, on the
    candidate's side as on the baseline's."""
    if result.could_not_run:
        return Verdict.UNTESTABLE
    if result.timed_out:
        return Verdict.TIMEOUT
    if result.crashed:
        return Verdict.CRASH
    return Verdict.NAN if classify.first_steps(result, steps).nonfinite else None
