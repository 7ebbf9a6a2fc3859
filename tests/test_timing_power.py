"""Statistical properties of the slowdown decision over seeded noise models
(pure, milliseconds): the A/A false slowdown rate, the power at 1.4x, the
pairs a clear case costs, and invariants checked with hypothesis.

The noise model is what a shared 2-core machine shows (benchmarks/
timing_power.py records the real thing): per-trial lognormal level noise,
per-step jitter, and contention: another process slowing a contiguous stretch
of a trial (any length, up to all of it) k times, k heavy-tailed (1.2 x
Pareto(1.5), capped at 12: one contended stretch in eight is slowed more than
4.8x; the recorded traces in benchmarks/data hold bare trials 5-7x their
usual typical step).

The decision rule assumes (`slowdown.TimingPair.decisive`) that other
processes using a share o of the CPUs slow a trial at most 1/(1 - o) times
(fair sharing). The model does not: the share the harness measures is drawn
independently of k (contention through memory bandwidth, caches or an SMT
sibling costs more than its CPU share; one recorded bare trial was 6.5x its
usual step with others_cpu 0.80, where fair sharing allows 4.9x). Only
`test_under_fair_sharing_...` assumes fair sharing, and says so.
"""

from __future__ import annotations

import math
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tfrepro.trials.slowdown import SequentialPolicy, TimingPair, TimingState, sequential_slowdown
from tfrepro.verdicts import Verdict

THRESHOLD = 1.25


def trial_steps(
    rng: random.Random,
    level: float,
    *,
    n: int = 60,
    trial_sd: float = 0.06,
    step_sd: float = 0.05,
    contention: float = 0.35,
    fair: bool = False,
) -> tuple[tuple[float, ...], bool, float]:
    """(steady step times, quiet, the share of the CPUs others used as the
    harness would measure it). A contended stretch is slowed k times (see the
    module docstring); the measured share is that stretch's share of the
    trial times a draw independent of k, or, with `fair`, the 1 - 1/k that
    fair sharing implies (under-read by up to 10%)."""
    base = 0.002 * level * math.exp(rng.gauss(0, trial_sd))
    steps = [base * math.exp(rng.gauss(0, step_sd)) for _ in range(n)]
    quiet = rng.random() >= contention
    others = rng.uniform(0.0, 0.2)
    if not quiet:
        length = n if rng.random() < 0.25 else rng.randrange(1, n)  # a quarter of them: the whole trial
        start, k = rng.randrange(n), min(12.0, 1.2 * rng.paretovariate(1.5))
        for j in range(length):
            steps[(start + j) % n] *= k
        share = (1 - 1 / k) * rng.uniform(0.9, 1.0) if fair else rng.uniform(0.05, 1.0)
        others = share * length / n
    return tuple(steps), quiet, others


def sampler(ratio: float, seed: int, measured: bool = False, **noise):
    rng = random.Random(seed)
    asked = []

    def sample(i: int) -> TimingPair:
        asked.append(i)
        (b, qb, ob), (c, qc, oc), (a, qa, oa) = (trial_steps(rng, k, **noise) for k in (1.0, ratio, 1.0))
        return TimingPair(b, c, a, quiet=qb and qc and qa, others=(ob, oc, oa) if measured else ())

    return sample, asked


def outcomes(ratio: float, seeds, measured: bool = False, **noise):
    return [
        sequential_slowdown(
            sampler(ratio, s, measured, **noise)[0], THRESHOLD, SequentialPolicy(min_samples=3, max_samples=16)
        )
        for s in seeds
    ]


def slowdowns(outs) -> int:
    return sum(o.verdict == Verdict.SLOWDOWN for o in outs)


def test_a_vs_a_false_slowdowns_stay_under_1_in_50():
    outs = outcomes(1.0, range(400))
    assert slowdowns(outs) <= 400 / 50, slowdowns(outs)  # measured 1/400
    assert sum(o.conclusive for o in outs) >= 0.8 * len(outs)  # the rest: "no slowdown (inconclusive)"


def test_a_vs_a_with_most_trials_contended_stays_under_1_in_25():
    # 70% of the trials contended, a quarter of those whole, none quiet
    # enough to tell: the candidate's own load cannot be told from a slowdown
    # by the step times alone
    outs = outcomes(1.0, range(1000, 1300), contention=0.7, trial_sd=0.1)
    assert slowdowns(outs) <= 300 / 25, slowdowns(outs)  # measured 6/300


def test_a_uniform_1_4x_slowdown_is_found_in_19_of_20():
    outs = outcomes(1.4, range(2000, 2200))
    assert slowdowns(outs) >= 0.95 * len(outs), slowdowns(outs)  # measured 200/200, 5.2 pairs


def test_a_1_1x_step_is_a_1_25x_slowdown_under_1_in_20():
    outs = outcomes(1.1, range(3000, 3200))
    assert slowdowns(outs) <= 200 / 20, slowdowns(outs)  # measured 4/200


def test_big_effects_take_one_pair_on_a_quiet_machine_three_on_a_shared_one():
    outs = outcomes(3.0, range(4000, 4100), contention=0.0)
    assert all(o.verdict == Verdict.SLOWDOWN and len(o.pairs) == 1 for o in outs)
    outs = outcomes(110.0, range(4100, 4150))
    assert all(o.verdict == Verdict.SLOWDOWN and len(o.pairs) <= 3 for o in outs)  # measured at most 2
    outs = outcomes(3.0, range(4200, 4300))
    assert all(o.verdict == Verdict.SLOWDOWN for o in outs)
    assert sum(len(o.pairs) for o in outs) / len(outs) <= 3  # measured 2.1


def test_measured_load_lets_big_effects_decide_on_fewer_pairs():
    # the same noise, the harness's load measurement given to the decision
    seeds = range(6000, 6300)
    before = outcomes(7.8, seeds)
    after = outcomes(7.8, seeds, measured=True)
    assert all(o.verdict == Verdict.SLOWDOWN for o in before + after)
    mean = [sum(len(o.pairs) for o in outs) / len(outs) for outs in (before, after)]
    assert mean[1] < mean[0] and mean[1] <= 1.3, mean  # measured 1.8 -> 1.1
    found = slowdowns(outcomes(1.4, range(7400, 7600), measured=True))
    assert found >= 0.95 * 200, found  # measured 199/200


def test_a_vs_a_with_the_measured_load_stays_under_1_in_25():
    # The load-aware rule lets one loaded clear pair decide when fair sharing
    # cannot explain it; here load may slow a trial more than its share, and
    # that costs false slowdowns (2/400 on the same seeds without the
    # measurement; see test_under_fair_sharing_... for where it costs none)
    got = slowdowns(outcomes(1.0, range(7000, 7400), measured=True))
    assert got <= 400 / 25, got  # measured 9/400


def test_a_vs_a_with_the_measured_load_and_most_trials_contended_stays_under_1_in_15():
    harsh = slowdowns(outcomes(1.0, range(1000, 1300), True, contention=0.7, trial_sd=0.1))
    assert harsh <= 300 / 15, harsh  # measured 15/300 (6/300 without the measurement)


def test_under_fair_sharing_the_measured_load_adds_no_false_slowdowns():
    # Conditional on the rule's own assumption (load with share o slows a
    # trial at most 1/(1 - o) times): a check of the rule's arithmetic, not
    # a figure for a real machine
    harsh = [
        slowdowns(outcomes(1.0, range(1000, 1300), m, contention=0.7, trial_sd=0.1, fair=True)) for m in (False, True)
    ]
    assert harsh[1] <= harsh[0], harsh  # measured 6 -> 5 of 300
    assert slowdowns(outcomes(1.0, range(7000, 7400), True, fair=True)) <= 400 / 50  # measured 2/400


def test_a_vs_a_is_mostly_cleared_on_one_pair():
    outs = outcomes(1.0, range(5000, 5100), contention=0.0)
    assert sum(len(o.pairs) == 1 and o.verdict == Verdict.OK for o in outs) >= 80


steps_st = st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=2, max_size=80).map(tuple)


@settings(max_examples=150, deadline=None)
@given(steps_st, steps_st, steps_st, st.floats(min_value=1e-3, max_value=1e3))
# Found by hypothesis in a fresh-clone run (R17): neighbours exactly at the
# split (0.5 s against 1/3 s) were split in one unit and not in the other.
@example(before=(0.5, 0.5), cand=(1.0, 1.0), after=(1.0, 0.25, 1 / 3), unit=0.0546875)
def test_the_decision_does_not_depend_on_the_unit(before, cand, after, unit):
    p = TimingPair(before, cand, after)
    q = TimingPair(*(tuple(x * unit for x in s) for s in (before, cand, after)))
    assert p.clear(THRESHOLD) == q.clear(THRESHOLD)
    assert math.isclose(p.log_ratio, q.log_ratio, abs_tol=1e-9)


@settings(max_examples=150, deadline=None)
@given(steps_st, steps_st, steps_st, st.floats(min_value=1.0, max_value=50.0))
def test_a_slower_candidate_never_looks_faster(before, cand, after, k):
    p = TimingPair(before, cand, after)
    q = TimingPair(before, tuple(x * k for x in cand), after)
    assert q.log_ratio >= p.log_ratio - 1e-12
    assert not (p.clear(THRESHOLD) == TimingState.SLOWER and q.clear(THRESHOLD) != TimingState.SLOWER)
    assert not (q.clear(THRESHOLD) == TimingState.NOT_SLOWER and p.clear(THRESHOLD) != TimingState.NOT_SLOWER)


@settings(max_examples=100, deadline=None)
@given(steps_st, st.floats(min_value=1.0, max_value=20.0))
def test_a_uniformly_slower_step_counts_in_full(steps, k):
    p = TimingPair(steps, tuple(x * k for x in steps), steps)
    assert math.isclose(math.exp(p.log_ratio), k, rel_tol=1e-9)
