"""Statistical properties of the slowdown decision over seeded noise models
(pure, milliseconds): the A/A false slowdown rate, the power at 1.4x, the
pairs a clear case costs, and invariants checked with hypothesis.

The noise model is what a shared 2-core machine shows (benchmarks/
timing_power.py records the real thing): per-trial lognormal level noise,
per-step jitter, and contention: another process slowing a contiguous stretch
of a trial (any length, up to all of it) 1.5-4x.
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tfrepro.trials.slowdown import TimingPair, TimingState, sequential_slowdown
from tfrepro.trials.values import Verdict

THRESHOLD = 1.25


def trial_steps(
    rng: random.Random,
    level: float,
    *,
    n: int = 60,
    trial_sd: float = 0.06,
    step_sd: float = 0.05,
    contention: float = 0.35,
) -> tuple[tuple[float, ...], bool, float]:
    """(steady step times, quiet, the share of the CPUs others used as the
    harness would measure it). A stretch slowed k times by another process
    means it took 1 - 1/k of the CPUs over that stretch (fair sharing, the
    most load can do; measured far less); the harness sees that share
    averaged over the trial, and here under-reads it by up to 10%."""
    base = 0.002 * level * math.exp(rng.gauss(0, trial_sd))
    steps = [base * math.exp(rng.gauss(0, step_sd)) for _ in range(n)]
    quiet = rng.random() >= contention
    others = rng.uniform(0.0, 0.2)
    if not quiet:
        length = n if rng.random() < 0.25 else rng.randrange(1, n)  # a quarter of them: the whole trial
        start, k = rng.randrange(n), rng.uniform(1.5, 4.0)
        for j in range(length):
            steps[(start + j) % n] *= k
        others = (1 - 1 / k) * length / n * rng.uniform(0.9, 1.0)
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
        sequential_slowdown(sampler(ratio, s, measured, **noise)[0], THRESHOLD, min_samples=3, max_samples=16)
        for s in seeds
    ]


def test_a_vs_a_false_slowdowns_stay_under_1_in_50():
    outs = outcomes(1.0, range(400))
    false = sum(o.verdict == Verdict.SLOWDOWN for o in outs)
    assert false <= 400 / 50, false
    assert sum(o.conclusive for o in outs) >= 0.8 * len(outs)  # the rest: "no slowdown (inconclusive)"


def test_a_vs_a_with_most_trials_contended_stays_under_1_in_15():
    # 70% of the trials contended, a sixth of them whole, none quiet enough
    # to tell: harsher than the traces recorded at load 10 on 2 cores (1.8%
    # there). The candidate's own load cannot be told from a slowdown by the
    # step times alone (measured 15/300).
    outs = outcomes(1.0, range(1000, 1300), contention=0.7, trial_sd=0.1)
    assert sum(o.verdict == Verdict.SLOWDOWN for o in outs) <= 300 / 15


def test_a_uniform_1_4x_slowdown_is_found_in_19_of_20():
    outs = outcomes(1.4, range(2000, 2200))
    found = sum(o.verdict == Verdict.SLOWDOWN for o in outs)
    assert found >= 0.95 * len(outs), found


def test_a_1_1x_step_is_not_a_1_25x_slowdown():
    outs = outcomes(1.1, range(3000, 3200))
    assert sum(o.verdict == Verdict.SLOWDOWN for o in outs) <= 200 / 20  # measured 9/200


def test_big_effects_take_one_pair_on_a_quiet_machine_three_on_a_shared_one():
    outs = outcomes(3.0, range(4000, 4100), contention=0.0)
    assert all(o.verdict == Verdict.SLOWDOWN and len(o.pairs) == 1 for o in outs)
    outs = outcomes(110.0, range(4100, 4150))
    assert all(o.verdict == Verdict.SLOWDOWN and len(o.pairs) <= 3 for o in outs)
    outs = outcomes(3.0, range(4200, 4300))
    assert all(o.verdict == Verdict.SLOWDOWN for o in outs)
    assert sum(len(o.pairs) for o in outs) / len(outs) <= 3.5  # measured 3.2


def test_measured_load_lets_big_effects_decide_on_fewer_pairs_without_false_slowdowns():
    # the same noise, the harness's load measurement given to the decision
    seeds = range(6000, 6300)
    before = outcomes(7.8, seeds)
    after = outcomes(7.8, seeds, measured=True)
    assert all(o.verdict == Verdict.SLOWDOWN for o in before + after)
    mean = [sum(len(o.pairs) for o in outs) / len(outs) for outs in (before, after)]
    assert mean[1] < mean[0] and mean[1] <= 1.3, mean  # measured 1.7 -> 1.1
    assert sum(o.verdict == Verdict.SLOWDOWN for o in outcomes(1.0, range(7000, 7400), measured=True)) <= 400 / 50
    found = sum(o.verdict == Verdict.SLOWDOWN for o in outcomes(1.4, range(7400, 7600), measured=True))
    assert found >= 0.95 * 200, found
    harsh = [
        sum(o.verdict == Verdict.SLOWDOWN for o in outcomes(1.0, range(1000, 1300), m, contention=0.7, trial_sd=0.1))
        for m in (False, True)
    ]
    assert harsh[1] <= harsh[0] and harsh[1] <= 300 / 15, harsh  # no more false slowdowns than without it


def test_a_vs_a_is_mostly_cleared_on_one_pair():
    outs = outcomes(1.0, range(5000, 5100), contention=0.0)
    assert sum(len(o.pairs) == 1 and o.verdict == Verdict.OK for o in outs) >= 80


steps_st = st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=2, max_size=80).map(tuple)


@settings(max_examples=150, deadline=None)
@given(steps_st, steps_st, steps_st, st.floats(min_value=1e-3, max_value=1e3))
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
