"""Timing comparisons for a slowdown hunt: one pool of baseline timing trials
shared by every candidate, and the evidence gathered per configuration.

Each candidate trial runs between the pool's latest baseline trial and a
fresh one (B C B C B ...), so one baseline trial serves the candidates on
both sides of it; `timed` adds pairs to a configuration's evidence until
`classify.sequential_slowdown` decides over all of it (the replay continues
the search's evidence instead of starting over). Runs nothing itself: the
engine injects `trial(config, repeat, role)` (one timing trial, alone) and
`failure(config, result)` (the nan/crash/timeout verdict that stops timing).
"""

from __future__ import annotations

from collections.abc import Callable

from tfrepro.bisect.search import Config
from tfrepro.trials import classify
from tfrepro.trials.values import TrialResult, Verdict

# Repeat-index bases: far apart so that no two roles ever share a cache entry.
# The k-th timing trial of a configuration (baseline: of the pool) is base + k,
# and a run asks for them in a deterministic order, so a resumed bisect gets
# every finished one from the cache.
TIMING_CANDIDATE = 100
TIMING_BASELINE = 10_000


def _quiet(t: TrialResult) -> bool:
    """The harness measured little other load meanwhile (unknown: not quiet)."""
    others = t.extra.get("others_cpu")
    return others is not None and others <= classify.QUIET_OTHERS


class TimingPool:
    def __init__(
        self,
        trial: Callable[[Config, int, str], TrialResult],
        failure: Callable[[Config, TrialResult], Verdict],
        threshold: float,
    ) -> None:
        self.trial, self.failure, self.threshold = trial, failure, threshold
        self.pool: list[TrialResult] = []  # baseline timing trials, in the order run
        self.pairs: dict[Config, list[classify.TimingPair]] = {}  # the evidence per configuration
        self.outcomes: dict[Config, list[classify.TimingOutcome]] = {}

    def _baseline(self) -> TrialResult:
        self.pool.append(self.trial(frozenset(), TIMING_BASELINE + len(self.pool), "timing-baseline"))
        return self.pool[-1]

    def timed(
        self, config: Config, *, fresh: int = 1, min_pairs: int = 3, max_pairs: int = 16
    ) -> classify.TimingOutcome:
        """New pairs of `config` (at least `fresh`, at most `max_pairs`) added
        to its evidence, decided over all of it."""
        evidence = self.pairs.setdefault(config, [])

        def pair(i: int):
            before = self.pool[-1] if self.pool else self._baseline()
            c = self.trial(config, TIMING_CANDIDATE + len(evidence), "timing")
            stop = self.failure(config, c)
            if stop != Verdict.OK:
                return stop
            after = self._baseline()
            if any(b.crashed or b.timed_out or b.nonfinite for b in (before, after)):
                return Verdict.UNTESTABLE
            got = classify.TimingPair(
                *(tuple(t.steady_step_times()) for t in (before, c, after)),
                quiet=all(_quiet(t) for t in (before, c, after)),
                others=tuple(t.extra.get("others_cpu") for t in (before, c, after)),
            )
            if min(len(got.before), len(got.candidate), len(got.after)) < 2:
                return Verdict.UNTESTABLE
            evidence.append(got)
            return got

        got = classify.sequential_slowdown(
            pair,
            self.threshold,
            prior=tuple(evidence),
            min_new=fresh,
            min_samples=min_pairs,
            max_samples=max(max_pairs, fresh),
        )
        self.outcomes.setdefault(config, []).append(got)
        return got
