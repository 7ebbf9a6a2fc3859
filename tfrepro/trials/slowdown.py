"""The slowdown decision (pure, no I/O): a slowdown is never read off one trial.

Each candidate trial runs between two baseline trials (A B A); per trial the
typical step is the median of its least-disturbed stretch of steady-state
steps (`typical_step`; Contract 3: a uniformly slower step counts in full);
per pair, the log-ratio of the candidate's typical step to the geometric mean
of its two neighbours'. Across pairs: the ratio is exp(median log-ratio),
"slower" needs it at or above the `slowdown` threshold *and* the log-ratios
significantly above log sqrt(threshold) (exact Wilcoxon signed-rank,
one-sided); "not slower" needs them significantly below log(threshold). One
clear-cut pair decides alone when the machine's load cannot explain it
(`TimingPair.clear` and `decisive`), and later pairs must agree with it. When
the evidence is inconclusive the sequential policy asks for another pair, up
to a budget, and at the budget it says "no slowdown (inconclusive)" rather
than guess. Measured: tests/test_timing_power.py (seeded noise models),
benchmarks/timing_power.py (real trials, recorded real step-time traces
resampled).

Nothing here sleeps, reads a clock or starts a process: samples come from an
injected function, and every test is exact (no randomness).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum

from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

# The statistic (Contract 3: "the typical steady-state step"). Per trial, the
# median step time of its least-disturbed stretch: the steady steps cut into
# up to TIMING_WINDOWS consecutive windows (at least MIN_WINDOW_STEPS steps
# each), the median of each, the lowest of those. On a shared machine another
# process steals the CPU for stretches of a trial (measured on a 2-core box at
# load 5-9: medians of eighths of one trial 2.4 to 12.9 ms); those stretches
# move the trial's median, not the median of a window they missed. A
# uniformly slower step moves every window's median, so it counts in full,
# and so does a slowdown that hits two steps in three (unlike a low quantile,
# which only sees the fastest steps). The price: a slowdown that hits only
# about half of the steps, or only the last stretch of the trial (a leak),
# may be seen partly. On an undisturbed trial it is the median, less a
# few percent (tests/test_timing.py). Per pair, the log-ratio of the
# candidate's to the geometric mean of its two neighbours' (A B A: a drift or
# a burst of load that spans the three hits both sides).
TIMING_WINDOWS = 4
MIN_WINDOW_STEPS = 8
TIMING_STATISTIC = (
    "per trial: lowest median over consecutive windows of the steady-state steps; "
    "per pair: log(candidate / geometric mean of the baseline trials before and after)"
)
# A single pair decides when it is clear-cut: the candidate's typical step at
# least 1 + FAST_EXCESS x (threshold - 1) times each neighbour's, and its
# fastest steps (10th percentile) too, i.e. the whole distribution moved; or
# both at most 1 + FAST_OK_EXCESS x (threshold - 1) times each neighbour's.
# Clear pairs decide: every pair so far, when one of them had the machine to
# itself (`quiet`: other processes used at most QUIET_OTHERS of its CPUs
# meanwhile, as the harness measures it), so one quiet clear pair is enough.
# On a shared machine a burst of load can cover a whole trial and no ratio
# rules it out (measured at load 4-13 on 2 cores: a bare trial 6.5x its
# usual typical step), so it takes LOADED_CLEAR_SLOWER clear "slower" pairs
# or LOADED_CLEAR_NOT_SLOWER clear "not slower" ones, none saying the
# opposite and the ratio over all pairs on their side (unclear pairs do not
# count). benchmarks/timing_power.py resample on those traces: with 2 and 2,
# A/A false slowdowns 1.4% and power at 1.4x 98%; with 2 and 1, power 94%.
# A loaded clear pair still decides alone when the load it measured cannot
# explain it (`TimingPair.decisive`): load only ever slows a trial, and
# other processes using a share o of the CPUs slow it at most 1/(1 - o)
# times (fair sharing: measured far less, <= 1.22x at o = 0.5-0.8 on the
# load-10 traces), so a candidate at least big/(1 - o) times each neighbour
# (o its own load, at most LOADED_MAX_OTHERS) is slower whatever the load
# did; and a candidate plainly the same as two quiet neighbours is not
# slower, whatever load it met itself.
FAST_EXCESS = 3.0
FAST_OK_EXCESS = 0.5
QUIET_OTHERS = 0.25
LOADED_CLEAR_SLOWER = 2
LOADED_CLEAR_NOT_SLOWER = 2
LOADED_MAX_OTHERS = 0.8
# A clear pair counts toward the loaded rules only when its three trials saw
# a like machine: load only ever slows a trial, so neighbours more loaded
# than the candidate make it look fast, and a candidate more loaded than its
# neighbours makes it look slow. A clear "not slower" pair whose neighbours'
# others_cpu exceeds the candidate's by more than LOAD_MATCH (a clear
# "slower" one whose candidate's exceeds a neighbour's by as much) is not
# counted (still, as any clear pair, it vetoes the opposite loaded rule).
# Measured: the journey's mixed_precision_cpu (a real ~1.4x) was decided
# "not slower" on two clear pairs in J9 (2026-12-02), one with the candidate
# at others 0.0 and its neighbours at 0.65 and 0.50 (0.73x), while three
# like-loaded pairs said 1.41-1.50x.
LOAD_MATCH = 0.25
# Two baseline neighbours further apart than this did not see the same
# machine: tests/test_timing_power.py's contention model (seeds 2000-2199
# and 0-399), power at 1.4x 185/200 -> 200/200 with it, A/A unchanged at 1/400.
NEIGHBOUR_SPLIT = 1.5
# Ratios of step times compared with a bound: within this relative distance
# they count as on it, so the same pair in other units (ms, s) decides alike.
ROUNDING = 1e-9


def _p10(xs: Sequence[float]) -> float:
    return sorted(xs)[int(0.1 * (len(xs) - 1))]


def typical_step(steady: Sequence[float]) -> float | None:
    """The typical step of one trial's steady-state step times (see
    TIMING_STATISTIC); None for no step."""
    n = len(steady)
    if n == 0:
        return None
    k = max(1, min(TIMING_WINDOWS, n // MIN_WINDOW_STEPS))
    return min(statistics.median(steady[i * n // k : (i + 1) * n // k]) for i in range(k))


def timing_sample(result: TrialResult) -> float | None:
    """One trial's typical step (warm-up excluded; see `typical_step`);
    None when fewer than 2 steps are past the warm-up."""
    steady = result.steady_step_times()
    return typical_step(steady) if len(steady) >= 2 else None


@dataclass(frozen=True)
class TimingPair:
    """One candidate trial and the baseline trials right before and after it
    (steady-state step times, seconds; `after` may be empty). `quiet`: no
    other process competed for the CPUs meanwhile (see QUIET_OTHERS).
    `others`: the share of the CPUs other processes used during (before,
    candidate, after), as the harness measured it (None: unknown); empty when
    the caller knows only `quiet`."""

    before: tuple[float, ...]
    candidate: tuple[float, ...]
    after: tuple[float, ...] = ()
    quiet: bool = True
    others: tuple[float | None, ...] = ()

    @property
    def baselines(self) -> tuple[tuple[float, ...], ...]:
        return tuple(b for b in (self.before, self.after) if b)

    @property
    def baseline_step(self) -> float:
        """Geometric mean of the neighbours' typical steps; the faster one
        when they disagree by more than NEIGHBOUR_SPLIT (load only ever slows
        a trial down: the slower neighbour is the disturbed one). A ratio at
        the split itself, up to rounding, is no split: the same pair in other
        units decides alike (0.5 s against 1/3 s is 1.5 in seconds and a hair
        under it in other units)."""
        steps = [typical_step(b) for b in self.baselines]
        if max(steps) / min(steps) > NEIGHBOUR_SPLIT * (1 + ROUNDING):
            return min(steps)
        return math.exp(sum(math.log(x) for x in steps) / len(steps))

    @property
    def candidate_step(self) -> float:
        return typical_step(self.candidate)

    @property
    def log_ratio(self) -> float:
        return math.log(self.candidate_step / self.baseline_step)

    def clear(self, threshold: float) -> TimingState | None:
        """SLOWER / NOT_SLOWER when this pair alone is clear-cut (see
        FAST_EXCESS), else None. Needs both neighbours, 2 steps each."""
        if len(self.baselines) < 2 or min(len(x) for x in (self.candidate, *self.baselines)) < 2:
            return None
        big, small = 1 + FAST_EXCESS * (threshold - 1), 1 + FAST_OK_EXCESS * (threshold - 1)
        low, high = self._excess()  # a ratio at a bound, up to rounding, counts as on it
        if low >= big * (1 - ROUNDING):
            return TimingState.SLOWER
        return TimingState.NOT_SLOWER if high <= small * (1 + ROUNDING) else None

    def _excess(self) -> tuple[float, float]:
        """The lowest and highest of the candidate's typical step and 10th
        percentile over each neighbour's same."""
        c, c10 = typical_step(self.candidate), _p10(self.candidate)
        ratios = [r for b in self.baselines for r in (c / typical_step(b), c10 / _p10(b))]
        return min(ratios), max(ratios)

    def _loads(self) -> tuple[float | None, list[float | None]]:
        """others_cpu of the candidate, and of each neighbour it has."""
        before, cand, after = (tuple(self.others) + (None, None, None))[:3]
        return cand, [o for o, b in ((before, self.before), (after, self.after)) if b]

    def load_matched(self, state: TimingState | None) -> bool:
        """Whether a clear `state` of this pair may count toward the loaded
        rules (see LOAD_MATCH); True when the load is not fully known."""
        cand, neighbours = self._loads()
        if state is None or cand is None or not neighbours or None in neighbours:
            return True
        if state == TimingState.NOT_SLOWER:
            return max(neighbours) - cand <= LOAD_MATCH
        return cand - min(neighbours) <= LOAD_MATCH

    def decisive(self, threshold: float) -> TimingState | None:
        """The clear state (`clear`) when this pair may decide alone: on a
        quiet machine, or when the load it measured cannot explain it (see
        LOADED_MAX_OTHERS). Without `others`, the `quiet` flag decides."""
        state = self.clear(threshold)
        if state is None or not self.others:
            return state if self.quiet else None
        cand, neighbours = self._loads()
        if state == TimingState.SLOWER:
            if cand is None or cand > LOADED_MAX_OTHERS:
                return None
            if cand <= QUIET_OTHERS:
                return state  # loaded neighbours only hide a slowdown
            return state if self._excess()[0] >= (1 + FAST_EXCESS * (threshold - 1)) / (1 - cand) else None
        return state if all(o is not None and o <= QUIET_OTHERS for o in neighbours) else None

    def to_dict(self) -> dict[str, float]:
        return {
            "baseline": self.baseline_step,
            "candidate": self.candidate_step,
            "quiet": self.quiet,
            "others": list(self.others),
            "baseline_steps": sum(len(b) for b in self.baselines),
            "candidate_steps": len(self.candidate),
        }


def timing_pair(before: TrialResult, candidate: TrialResult, after: TrialResult) -> TimingPair | None:
    """The pair of three timing trials run in this order (B C B): their
    steady-state step times and the harness's `others_cpu` of each (unknown:
    not quiet). None when one of them has fewer than 2 steady steps."""
    trials = (before, candidate, after)
    others = tuple(t.extra.get("others_cpu") for t in trials)
    got = TimingPair(
        *(tuple(t.steady_step_times()) for t in trials),
        quiet=all(o is not None and o <= QUIET_OTHERS for o in others),
        others=others,
    )
    return got if min(len(got.before), len(got.candidate), len(got.after)) >= 2 else None


def signed_rank_greater(d: Sequence[float]) -> float:
    """Exact one-sided p-value of the Wilcoxon signed-rank test that the
    differences `d` are centred above 0 (zeros dropped, ties by midranks).
    Rank-based: one wild pair (a noisy neighbour) cannot decide it. The
    smallest p-value with n pairs is 2**-n (5 pairs: 0.031)."""
    d = [x for x in d if x != 0]
    n = len(d)
    if n == 0:
        return 1.0
    ranks2 = [0] * n  # doubled midranks: integers
    i = 0  # the tied |d|s at sorted positions i..i+len-1 share the doubled midrank 2i + len + 1
    for _, tied in itertools.groupby(sorted(range(n), key=lambda k: abs(d[k])), key=lambda k: abs(d[k])):
        tied = list(tied)
        for k in tied:
            ranks2[k] = 2 * i + len(tied) + 1
        i += len(tied)
    observed = sum(r for r, x in zip(ranks2, d) if x > 0)
    counts = Counter({0: 1})  # distribution of the doubled W+ over the 2**n sign patterns
    for r in ranks2:
        counts = counts + Counter({w + r: c for w, c in counts.items()})
    return sum(c for w, c in counts.items() if w >= observed) / 2**n


class TimingState(str, Enum):
    SLOWER = "slower"
    NOT_SLOWER = "not-slower"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class TimingDecision:
    """The decision over the pairs so far.

    `state` is "slower" (ratio >= threshold and the log-ratios significantly
    above log sqrt(threshold), or enough clear pairs, see FAST_EXCESS),
    "not-slower" (ratio < threshold and the log-ratios significantly below
    log threshold, or enough clear pairs) or "inconclusive". `ratio` is exp of the
    median log-ratio; `p_value` is for "slower"; `fast` says the clear-pair
    rule decided."""

    state: TimingState
    ratio: float
    p_value: float
    n: int
    fast: bool = False


@dataclass(frozen=True)
class SequentialPolicy:
    """How much evidence `sequential_slowdown` gathers, and how it (and
    `decide_slowdown`) decides: at least `min_new` new pairs, the rank test
    from `min_samples` pairs on, at most `max_samples` new ones;
    `loaded_not_slower` clear "not slower" pairs decide on a loaded machine;
    `alpha` and `alpha_not_slower` are the rank test's levels for "slower"
    and for "not slower"."""

    min_new: int = 1
    min_samples: int = 3
    max_samples: int = 10
    alpha: float = 0.05
    loaded_not_slower: int = LOADED_CLEAR_NOT_SLOWER
    alpha_not_slower: float = 0.05


def decide_slowdown(
    pairs: Sequence[TimingPair], threshold: float, policy: SequentialPolicy = SequentialPolicy(min_samples=1)
) -> TimingDecision:
    """Pure decision over the pairs so far; see `TimingDecision`. The rank
    test is consulted from `policy.min_samples` pairs on; the clear-pair rule always."""
    n = len(pairs)
    logs = [p.log_ratio for p in pairs]
    ratio = math.exp(statistics.median(logs))
    # "Slower" is tested against a margin halfway (geometrically) to the
    # threshold rather than against "not faster": sequential looks at noisy
    # A/A data otherwise end in a false slowdown a few times in a hundred.
    p_slow = signed_rank_greater([x - 0.5 * math.log(threshold) for x in logs])
    p_ok = signed_rank_greater([math.log(threshold) - x for x in logs])
    clear = [p.clear(threshold) for p in pairs]
    slow_n, ok_n = clear.count(TimingState.SLOWER), clear.count(TimingState.NOT_SLOWER)
    matched = [c if p.load_matched(c) else None for p, c in zip(pairs, clear)]
    alone = {p.decisive(threshold) for p in pairs}
    loaded_slow = not ok_n and ratio >= threshold and matched.count(TimingState.SLOWER) >= LOADED_CLEAR_SLOWER
    loaded_ok = not slow_n and ratio < threshold and matched.count(TimingState.NOT_SLOWER) >= policy.loaded_not_slower
    if slow_n == n and TimingState.SLOWER in alone or loaded_slow:
        return TimingDecision(TimingState.SLOWER, ratio, p_slow, n, fast=True)
    if ok_n == n and TimingState.NOT_SLOWER in alone or loaded_ok:
        return TimingDecision(TimingState.NOT_SLOWER, ratio, p_slow, n, fast=True)
    # The rank test's answer, never before `policy.min_samples` pairs: slower (ratio at
    # or above the threshold and significant), not slower (below it and significant).
    state = TimingState.INCONCLUSIVE
    if n >= policy.min_samples and ratio / threshold >= 1 and p_slow <= policy.alpha:
        state = TimingState.SLOWER
    elif n >= policy.min_samples and ratio / threshold < 1 and p_ok <= policy.alpha_not_slower:
        state = TimingState.NOT_SLOWER
    return TimingDecision(state, ratio, p_slow, n)


@dataclass(frozen=True)
class TimingRecord:
    """A timing comparison as result.json and report.json hold it
    (`TimingOutcome.to_dict`) and as the report reads it back: the per-pair
    typical steps (seconds) of the baseline and candidate sides, each pair's
    `TimingPair.to_dict`. A key absent from a document reads as None."""

    statistic: str | None = None
    baseline: list[float] | None = None
    candidate: list[float] | None = None
    pairs: list[dict[str, object]] | None = None
    new_pairs: int | None = None
    p_value: float | None = None
    ratio: float | None = None
    fast: bool | None = None
    conclusive: bool | None = None
    verdict: str | None = None


@dataclass(frozen=True)
class TimingOutcome:
    """The end of a sequential timing comparison.

    `verdict` is SLOWDOWN only for a conclusive "slower"; at the pair budget
    an inconclusive comparison is reported as OK with `conclusive=False`, never
    as a guessed slowdown. `stopped` is a non-timing verdict (NAN, CRASH,
    TIMEOUT, UNTESTABLE) that ended the comparison early, else None. `pairs`
    is all the evidence (earlier pairs included), `new` how many were taken
    by this comparison.
    """

    verdict: Verdict
    conclusive: bool
    ratio: float | None
    p_value: float | None
    pairs: tuple[TimingPair, ...] = ()
    stopped: Verdict | None = None
    fast: bool = field(default=False, compare=False)  # the latest decision's `fast`
    new: int = 0

    @property
    def baseline(self) -> tuple[float, ...]:
        return tuple(p.baseline_step for p in self.pairs)

    @property
    def candidate(self) -> tuple[float, ...]:
        return tuple(p.candidate_step for p in self.pairs)

    def to_dict(self) -> dict[str, object]:
        """This comparison as written: its `TimingRecord`."""
        return asdict(
            TimingRecord(
                statistic=TIMING_STATISTIC,
                baseline=list(self.baseline),
                candidate=list(self.candidate),
                pairs=[p.to_dict() for p in self.pairs],
                new_pairs=self.new,
                p_value=self.p_value,
                ratio=self.ratio,
                fast=self.fast,
                conclusive=self.conclusive,
                verdict=self.verdict.value,
            )
        )


# A pair sampler runs the candidate once more between two baseline trials
# (never concurrently) and returns the pair; or a Verdict when a run could not
# be timed (the candidate crashed, went NaN...).
PairSampler = Callable[[int], "TimingPair | Verdict"]


def sequential_slowdown(
    sample_pair: PairSampler,
    threshold: float,
    policy: SequentialPolicy = SequentialPolicy(),
    *,
    prior: Sequence[TimingPair] = (),
) -> TimingOutcome:
    """Take pairs until the decision over all the evidence (`prior` pairs
    plus new ones) is conclusive or the policy's budget of new pairs is
    spent. Pair i is requested as
    `sample_pair(i)`, i = 0, 1, ... (the caller maps i to deterministic
    repeat indices, so an interrupted run resumes from its cache)."""
    pairs = list(prior)
    last: TimingDecision | None = None  # the latest decision

    def end(verdict: Verdict, conclusive: bool, d: TimingDecision | None, stopped=None, new=0):
        ratio, p_value = (d.ratio, d.p_value) if d else (None, None)
        return TimingOutcome(verdict, conclusive, ratio, p_value, tuple(pairs), stopped, bool(last and last.fast), new)

    for i in range(policy.max_samples):
        got = sample_pair(i)
        if isinstance(got, Verdict):
            return end(got, True, None, stopped=got, new=i)
        pairs.append(got)
        if i + 1 < policy.min_new:
            continue
        last = d = decide_slowdown(pairs, threshold, policy)
        if d.state != TimingState.INCONCLUSIVE:
            return end(Verdict.SLOWDOWN if d.state == TimingState.SLOWER else Verdict.OK, True, d, new=i + 1)
    return end(Verdict.OK, False, last, new=policy.max_samples)
