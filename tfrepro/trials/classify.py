"""The classifier: what a trial shows, relative to its reference (pure, no I/O).

Two questions live here, kept apart because they need different evidence:

- `symptoms` / `classify`: one trial against its reference. NaN, crash and
  timeout are facts of the trial alone; a mismatch compares the per-step losses
  with the reference, the same configuration with only its `affects_loss`
  features on (the baseline when it has none).
- `decide_slowdown` / `sequential_slowdown`: a slowdown is never read off one
  trial. It takes interleaved repeated runs of baseline and candidate (one
  timing sample per trial, see `timing_sample`), a ratio of their medians at
  or above the `slowdown` threshold *and* a significant one-sided rank test
  (Mann-Whitney by exact permutation) of the candidate scaled down by
  sqrt(threshold) against the baseline; when the evidence is inconclusive the
  sequential policy asks for another pair, up to a budget, and at the budget
  it says "no slowdown (inconclusive)" rather than guess. Measured on fakes
  (lognormal noise, 10% of trials doubled by contention): a 1.5x slowdown is
  found in ~95% of runs with 8% noise, an A/A comparison reports a slowdown
  in ~0.3% (10% noise) to ~1% (15% noise) of runs.

Nothing here sleeps, reads a clock or starts a process: randomness comes from
an injected `random.Random`, samples from an injected function.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from tfrepro.settings import SymptomSettings
from tfrepro.trials.memcheck import decide_memory, is_oom
from tfrepro.trials.values import SYMPTOM_ORDER, TrialResult, Verdict

# Denominator floor for relative loss deviations, as a fraction of the
# reference's largest |loss|: a loss that converges towards 0 would otherwise
# turn a tiny absolute wobble into an enormous relative one.
_REL_FLOOR = 1e-3


# --------------------------------------------------------------------------- losses


def loss_deviation(losses: Sequence[float], reference: Sequence[float]) -> float:
    """Largest relative deviation of `losses` from `reference`, step by step.

    Compared over the steps both have (a trial may stop early, e.g. on a NaN,
    which is a symptom of its own). Non-finite values count as an infinite
    deviation; no common step gives 0.0 (nothing to compare).
    """
    n = min(len(losses), len(reference))
    if n == 0:
        return 0.0
    finite_ref = [abs(x) for x in reference[:n] if math.isfinite(x)]
    scale = max(finite_ref, default=0.0)
    floor = max(_REL_FLOOR * scale, 1e-12)
    worst = 0.0
    for a, b in zip(losses[:n], reference[:n]):
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        worst = max(worst, abs(a - b) / max(abs(b), floor))
    return worst


def measure_noise(first: TrialResult, second: TrialResult) -> float:
    """The loss noise inherent to the project: the relative deviation between
    two runs of the same configuration (the baseline run twice). 0.0 under
    full determinism."""
    d = max(
        loss_deviation(first.losses, second.losses),
        loss_deviation(second.losses, first.losses),
    )
    return d if math.isfinite(d) else 0.0


def mismatch_tolerance(settings: SymptomSettings, noise: float) -> float:
    """The tolerance never falls below the measured noise: a project that is not
    reproducible to 5% cannot blame a feature for a 5% difference."""
    return max(settings.mismatch, noise)


# --------------------------------------------------------------------------- verdicts


def symptoms(
    result: TrialResult,
    *,
    reference: TrialResult | None,
    settings: SymptomSettings,
    noise: float = 0.0,
    baselines: Sequence[TrialResult] = (),
) -> frozenset[Verdict]:
    """Every symptom one trial shows (a NaN trial may also have crashed).

    `reference` is the trial the losses are compared with; None skips the
    mismatch check. `baselines` (the baseline configuration's runs) are what
    memory is compared with (`memcheck.py`); an out-of-memory kill is MEMORY,
    never CRASH, with or without them. Slowdown is never decided here (see
    `decide_slowdown`).
    """
    if result.could_not_run:  # lost by the executor: says nothing about the features
        return frozenset({Verdict.UNTESTABLE})
    found: set[Verdict] = set()
    if settings.nan and result.nonfinite:
        found.add(Verdict.NAN)
    if result.timed_out:
        found.add(Verdict.TIMEOUT)
    elif is_oom(result):
        found.add(Verdict.MEMORY)
    elif result.crashed:
        found.add(Verdict.CRASH)
    if reference is not None and not found:
        # A trial that stopped on NaN or died differs from any reference by
        # construction; reporting that as a mismatch too would only blur it.
        tol = mismatch_tolerance(settings, noise)
        if loss_deviation(result.losses, reference.losses) > tol:
            found.add(Verdict.MISMATCH)
    if baselines and not found - {Verdict.MISMATCH} and decide_memory(result, baselines, settings.memory).shows:
        found.add(Verdict.MEMORY)
    return frozenset(found)


def primary(shown: frozenset[Verdict] | set[Verdict], target: Verdict | None = None) -> Verdict:
    """One verdict out of several: the hunted `target` when shown (the search is
    locked onto one symptom), otherwise the first in `SYMPTOM_ORDER`, else OK."""
    if target is not None and target in shown:
        return target
    for v in SYMPTOM_ORDER:
        if v in shown:
            return v
    return Verdict.UNTESTABLE if Verdict.UNTESTABLE in shown else Verdict.OK


def classify(
    result: TrialResult,
    *,
    reference: TrialResult | None,
    settings: SymptomSettings,
    noise: float = 0.0,
    target: Verdict | None = None,
    baselines: Sequence[TrialResult] = (),
) -> Verdict:
    """The one verdict of a trial (see `symptoms` and `primary`)."""
    return primary(
        symptoms(result, reference=reference, settings=settings, noise=noise, baselines=baselines), target
    )


# --------------------------------------------------------------------------- timing

# The per-trial timing sample is a low quantile of the steady-state step
# times, not their median: on a shared machine another process steals the CPU
# for stretches of a trial, which moves the median of that trial (measured:
# per-trial medians of one configuration spread 0.9-7.9 ms on a loaded 2-core
# box, log-sd 0.76) far more than its fast steps (10th percentile: log-sd
# 0.38). A feature that slows every step moves the quantile just the same.
TIMING_QUANTILE = 0.1


def timing_sample(result: TrialResult, quantile: float = TIMING_QUANTILE) -> float | None:
    """One trial's timing sample: the `quantile` of its steady-state step
    times (warm-up excluded); None when too few steps are past the warm-up."""
    steady = sorted(result.steady_step_times())
    if len(steady) < 2:
        return None
    return steady[int(quantile * (len(steady) - 1))]



def _u_statistic(high: Sequence[float], low: Sequence[float]) -> float:
    """Mann-Whitney U: pairs where `high` beats `low` (ties count half)."""
    u = 0.0
    for h in high:
        for lo in low:
            u += 1.0 if h > lo else 0.5 if h == lo else 0.0
    return u


_EXACT_LIMIT = 5000  # enumerate every split up to this many (2n choose n)


def rank_test_greater(
    high: Sequence[float],
    low: Sequence[float],
    *,
    rng: random.Random,
    permutations: int = 2000,
) -> float:
    """One-sided p-value that `high` is stochastically greater than `low`.

    A permutation test of the Mann-Whitney U statistic: exact (all splits) for
    small samples, Monte Carlo with the injected RNG beyond. Rank-based, so one
    wild outlier (a GC pause, a noisy neighbour) cannot decide it. With 3 vs 3
    the smallest possible p-value is 1/20 = 0.05 (perfect separation).
    """
    pooled = list(high) + list(low)
    n = len(high)
    observed = _u_statistic(high, low)
    if math.comb(len(pooled), n) <= _EXACT_LIMIT:
        hits = total = 0
        for idx in itertools.combinations(range(len(pooled)), n):
            chosen = set(idx)
            h = [pooled[i] for i in idx]
            lo = [pooled[i] for i in range(len(pooled)) if i not in chosen]
            total += 1
            hits += _u_statistic(h, lo) >= observed - 1e-9
        return hits / total
    hits = 0
    for _ in range(permutations):
        shuffled = pooled[:]
        rng.shuffle(shuffled)
        hits += _u_statistic(shuffled[:n], shuffled[n:]) >= observed - 1e-9
    return (hits + 1) / (permutations + 1)


class TimingState(str, Enum):
    SLOWER = "slower"
    NOT_SLOWER = "not-slower"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class TimingDecision:
    """The decision over one set of interleaved samples (one number per trial,
    see `timing_sample`; seconds).

    `state` is "slower" (ratio >= threshold and candidate significantly slower
    than baseline), "not-slower" (candidate / threshold significantly faster
    than baseline: the ratio is credibly under the threshold) or
    "inconclusive". `p_value` is for "candidate slower than baseline".
    """

    state: TimingState
    ratio: float
    p_value: float
    p_not_slower: float
    n: int


def decide_slowdown(
    baseline: Sequence[float],
    candidate: Sequence[float],
    threshold: float,
    *,
    alpha: float = 0.05,
    rng: random.Random,
) -> TimingDecision:
    """Pure decision over interleaved samples; see `TimingDecision`."""
    if not baseline or not candidate:
        raise ValueError("decide_slowdown needs samples on both sides")
    ratio = statistics.median(candidate) / statistics.median(baseline)
    # "Slower" is tested against a margin halfway (geometrically) to the
    # threshold rather than against "not faster": sequential looks at noisy
    # A/A data otherwise end in a false slowdown a few times in a hundred.
    margin = math.sqrt(threshold)
    p_slow = rank_test_greater([c / margin for c in candidate], baseline, rng=rng)
    # "Not slower" is its own test: the candidate scaled down by the threshold
    # must be significantly faster than the baseline.
    scaled = [c / threshold for c in candidate]
    p_ok = rank_test_greater(baseline, scaled, rng=rng)
    if ratio >= threshold and p_slow <= alpha:
        state = TimingState.SLOWER
    elif ratio < threshold and p_ok <= alpha:
        state = TimingState.NOT_SLOWER
    else:
        state = TimingState.INCONCLUSIVE
    return TimingDecision(state, ratio, p_slow, p_ok, min(len(baseline), len(candidate)))


@dataclass(frozen=True)
class TimingOutcome:
    """The end of a sequential timing comparison.

    `verdict` is SLOWDOWN only for a conclusive "slower"; at the sample budget
    an inconclusive comparison is reported as OK with `conclusive=False`, never
    as a guessed slowdown. `stopped` is a non-timing verdict (NAN, CRASH,
    TIMEOUT, UNTESTABLE) that ended the comparison early, else None.
    """

    verdict: Verdict
    conclusive: bool
    ratio: float | None
    p_value: float | None
    baseline: tuple[float, ...] = ()
    candidate: tuple[float, ...] = ()
    stopped: Verdict | None = None
    decisions: tuple[TimingDecision, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, object]:
        return {
            "statistic": f"per-trial {TIMING_QUANTILE:.0%} quantile of steady-state step times (s)",
            "baseline": list(self.baseline),
            "candidate": list(self.candidate),
            "p_value": self.p_value,
            "ratio": self.ratio,
            "conclusive": self.conclusive,
            "verdict": self.verdict.value,
        }


# A pair sampler runs (baseline, candidate) once more, in that order and never
# concurrently, and returns their timing samples; or a Verdict when a run could not be
# timed (the candidate crashed, went NaN...).
PairSampler = Callable[[int], "tuple[float, float] | Verdict"]


def sequential_slowdown(
    sample_pair: PairSampler,
    threshold: float,
    *,
    min_samples: int = 3,
    max_samples: int = 10,
    alpha: float = 0.05,
    rng: random.Random,
) -> TimingOutcome:
    """Take interleaved pairs until the decision is conclusive or the budget is
    spent. Pair i is requested as `sample_pair(i)`, i = 0, 1, ... (the caller
    maps i to deterministic repeat indices, so an interrupted run resumes from
    its cache)."""
    if min_samples < 1 or max_samples < min_samples:
        raise ValueError("need 1 <= min_samples <= max_samples")
    base: list[float] = []
    cand: list[float] = []
    decisions: list[TimingDecision] = []

    def end(verdict: Verdict, conclusive: bool, d: TimingDecision | None, stopped=None):
        return TimingOutcome(
            verdict,
            conclusive,
            d.ratio if d else None,
            d.p_value if d else None,
            tuple(base),
            tuple(cand),
            stopped,
            tuple(decisions),
        )

    for i in range(max_samples):
        got = sample_pair(i)
        if isinstance(got, Verdict):
            return end(got, True, None, stopped=got)
        base.append(got[0])
        cand.append(got[1])
        if len(base) < min_samples:
            continue
        d = decide_slowdown(base, cand, threshold, alpha=alpha, rng=rng)
        decisions.append(d)
        if d.state == TimingState.SLOWER:
            return end(Verdict.SLOWDOWN, True, d)
        if d.state == TimingState.NOT_SLOWER:
            return end(Verdict.OK, True, d)
    return end(Verdict.OK, False, decisions[-1] if decisions else None)
