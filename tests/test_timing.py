"""The slowdown statistic and decision, case by case (pure: no TF, no clock).

The statistical properties over seeded noise models (A/A false positives,
power at 1.4x) are in test_timing_power.py.
"""

from __future__ import annotations

import math

import pytest

from tfrepro.trials.classify import first_steps
from tfrepro.trials.slowdown import (
    SequentialPolicy,
    TimingPair,
    TimingState,
    decide_slowdown,
    sequential_slowdown,
    signed_rank_greater,
    timing_sample,
    typical_step,
)
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

STEADY = tuple(0.002 * (1 + 0.01 * (i % 7)) for i in range(60))  # 2 ms steps, a little jitter


def scaled(steps, k: float) -> tuple[float, ...]:
    return tuple(x * k for x in steps)


def pair(k: float, *, before=STEADY, after=STEADY) -> TimingPair:
    return TimingPair(before, scaled(STEADY, k), after)


# -- the per-trial statistic ------------------------------------------------------------


def test_typical_step_is_the_median_of_an_undisturbed_trial():
    import statistics

    assert typical_step(STEADY) == pytest.approx(statistics.median(STEADY), rel=0.05)
    assert typical_step(()) is None
    assert typical_step((0.003,)) == 0.003


def test_a_uniformly_slower_step_counts_in_full():
    assert typical_step(scaled(STEADY, 1.4)) / typical_step(STEADY) == pytest.approx(1.4)


def test_a_slowdown_of_every_other_step_counts_unlike_a_low_quantile():
    # mixed_float16 on a CPU: the motivating failure of issue 15, where a 10th
    # percentile saw 1.075x. Here two steps in three are 1.5x slower.
    mixed = tuple(x * (1.5 if i % 3 else 1.0) for i, x in enumerate(STEADY))
    assert typical_step(mixed) / typical_step(STEADY) >= 1.4
    low_quantile = sorted(mixed)[len(mixed) // 10] / sorted(STEADY)[len(STEADY) // 10]
    assert low_quantile < 1.1


def test_contention_over_most_of_a_trial_leaves_its_typical_step_alone():
    # another process steals the CPU for 70% of the trial, 3x slower meanwhile
    contended = STEADY[:18] + scaled(STEADY[18:], 3.0)
    assert typical_step(contended) == pytest.approx(typical_step(STEADY), rel=0.05)
    import statistics

    assert statistics.median(contended) > 2 * statistics.median(STEADY)  # the median moved


def test_timing_sample_skips_warmup():
    t = TrialResult(step_times=(0.9, 0.5, 0.4) + STEADY)
    assert timing_sample(t) == typical_step(STEADY)
    assert timing_sample(TrialResult(step_times=(0.9, 0.5, 0.4, 0.001))) is None


def test_first_steps_is_the_loss_view_of_a_longer_timing_trial():
    losses = tuple(1.0 / (i + 1) for i in range(200)) + (math.nan,)
    t = TrialResult(losses=losses, first_nonfinite_step=201, step_times=(0.002,) * 201)
    v = first_steps(t, 50)
    assert len(v.losses) == 50 and not v.nonfinite and v.step_times == t.step_times
    assert first_steps(t, 500) is t
    early = TrialResult(losses=(1.0, math.nan), first_nonfinite_step=2)
    assert first_steps(early, 50).nonfinite


# -- the rank test -----------------------------------------------------------------------


def test_signed_rank_exact_values():
    assert signed_rank_greater([1, 2, 3, 4, 5]) == pytest.approx(1 / 32)
    assert signed_rank_greater([-1, -2, -3, -4, -5]) == 1.0
    assert signed_rank_greater([1, 2, 3]) == pytest.approx(1 / 8)  # 3 pairs can never pass 0.05
    # W+ = 2 + 3 = 5 of 6; sign patterns with W+ >= 5: {2,3}, {1,2,3} -> 2/8
    assert signed_rank_greater([-1, 2, 3]) == pytest.approx(2 / 8)
    assert signed_rank_greater([0, 0]) == 1.0
    # ties by midranks: |d| = 1, 1 -> ranks 1.5, 1.5
    assert signed_rank_greater([1, 1]) == pytest.approx(1 / 4)


# -- one pair ------------------------------------------------------------------------------


def test_a_clear_pair_decides_alone():
    assert pair(110.0).clear(1.25) == TimingState.SLOWER
    assert pair(3.0).clear(1.25) == TimingState.SLOWER
    assert pair(1.0).clear(1.25) == TimingState.NOT_SLOWER
    assert pair(1.4).clear(1.25) is None  # above the threshold, but not by several times its excess
    assert pair(1.1).clear(1.25) == TimingState.NOT_SLOWER  # within half the excess
    assert pair(1.2).clear(1.25) is None
    assert pair(3.0, after=()).clear(1.25) is None  # needs both neighbours


def test_a_candidate_slowed_by_contention_only_is_not_a_clear_slowdown():
    # same code, but another process slowed 90% of the candidate's steps 3x:
    # its fastest steps are as fast as the baseline's
    contended = STEADY[:6] + scaled(STEADY[6:], 3.0)
    assert TimingPair(STEADY, contended, STEADY).clear(1.25) is None
    # ... 70%: its least-disturbed stretch is clean: clearly the same code
    contended = STEADY[:18] + scaled(STEADY[18:], 3.0)
    assert TimingPair(STEADY, contended, STEADY).clear(1.25) == TimingState.NOT_SLOWER


def test_a_contended_neighbour_keeps_a_pair_from_being_clearly_fine():
    slow_base = scaled(STEADY, 1.5)
    assert TimingPair(slow_base, scaled(STEADY, 1.4), STEADY).clear(1.25) is None


def loaded(k: float, others: tuple) -> TimingPair:
    return TimingPair(STEADY, scaled(STEADY, k), STEADY, quiet=False, others=others)


def test_a_loaded_clear_slowdown_decides_alone_only_beyond_what_its_load_explains():
    # other processes used half the CPUs during the candidate: load alone
    # could make it up to 2x slower, so a clear pair needs 1.75 / 0.5 = 3.5x
    assert loaded(7.8, (0.5, 0.5, 0.5)).decisive(1.25) == TimingState.SLOWER
    assert loaded(3.0, (0.5, 0.5, 0.5)).decisive(1.25) is None
    assert loaded(3.0, (0.5, 0.5, 0.5)).clear(1.25) == TimingState.SLOWER  # clear, but not alone
    assert loaded(3.0, (0.7, 0.1, 0.7)).decisive(1.25) == TimingState.SLOWER  # a quiet candidate: loaded
    # neighbours only hide a slowdown
    assert loaded(110.0, (0.0, 0.9, 0.0)).decisive(1.25) is None  # too loaded to judge alone
    assert loaded(110.0, (0.0, None, 0.0)).decisive(1.25) is None  # unknown load: never alone


# The six pairs of a healthy feature triple in the bisect suite at load 5 on
# 2 cores (eager_debug, B3, 2026-12-02): candidate typical steps over the
# baseline's, and others_cpu during (before, candidate, after). The rank
# test decided "slower" (ratio 2.12, p 0.031) and the hunt named three false
# culprits. Two guards were tried and reverted (docs/benchmarks.md, "Swamped
# pairs"): the load reading cannot tell a starved trial from one that waits.
SWAMPED_B3 = [
    (3.0, (0.908, 0.813, 0.867)),
    (1.44, (0.867, 0.774, 0.846)),
    (3.08, (0.846, 0.937, 0.867)),
    (1.5, (0.867, 0.785, 0.915)),
    (3.1, (0.915, 0.915, 0.828)),
    (0.94, (0.823, 0.854, 0.768)),
]


@pytest.mark.xfail(strict=True, reason="known: pairs at others_cpu 0.8-0.9 can decide slower (B3)")
def test_pairs_that_load_alone_can_explain_do_not_decide_slower():
    assert decide_slowdown([loaded(k, o) for k, o in SWAMPED_B3], 1.25).state != TimingState.SLOWER


def test_a_loaded_candidate_plainly_the_same_as_quiet_neighbours_is_not_slower():
    assert loaded(1.0, (0.1, 0.9, 0.2)).decisive(1.25) == TimingState.NOT_SLOWER
    assert loaded(1.0, (0.6, 0.1, 0.1)).decisive(1.25) is None  # a loaded neighbour can hide a slowdown
    assert loaded(1.0, (None, 0.1, 0.1)).decisive(1.25) is None


def test_without_measured_load_the_quiet_flag_decides_as_before():
    assert TimingPair(STEADY, scaled(STEADY, 3.0), STEADY, quiet=True).decisive(1.25) == TimingState.SLOWER
    assert TimingPair(STEADY, scaled(STEADY, 3.0), STEADY, quiet=False).decisive(1.25) is None


def test_one_decisive_loaded_pair_ends_the_comparison():
    d = decide_slowdown([loaded(7.8, (0.5, 0.5, 0.5))], 1.25, SequentialPolicy(min_samples=3))
    assert (d.state, d.fast, d.n) == (TimingState.SLOWER, True, 1)
    d = decide_slowdown([loaded(3.0, (0.5, 0.5, 0.5))], 1.25, SequentialPolicy(min_samples=3))
    assert d.state == TimingState.INCONCLUSIVE
    d = decide_slowdown([loaded(3.0, (0.5, 0.5, 0.5))] * 2, 1.25, SequentialPolicy(min_samples=3))
    assert (d.state, d.fast) == (TimingState.SLOWER, True)  # two clear loaded pairs, as before


# -- the decision over pairs ------------------------------------------------------------------


def test_decide_over_pairs_needs_significance_from_the_rank_test():
    noisy = [pair(k) for k in (1.5, 1.45, 1.55)]  # 3 pairs: the rank test cannot pass yet
    d = decide_slowdown(noisy, 1.25, SequentialPolicy(min_samples=3))
    assert d.state == TimingState.INCONCLUSIVE and d.ratio == pytest.approx(1.5, rel=0.01)
    d = decide_slowdown(noisy + [pair(1.5), pair(1.42)], 1.25, SequentialPolicy(min_samples=3))
    assert d.state == TimingState.SLOWER and d.p_value <= 0.05 and not d.fast
    d = decide_slowdown([pair(k) for k in (1.1, 1.12, 1.08, 1.1, 1.05)], 1.25)
    assert d.state == TimingState.NOT_SLOWER  # significantly under the threshold
    d = decide_slowdown([pair(110.0)], 1.25)
    assert d.state == TimingState.SLOWER and d.fast and d.n == 1


def test_clear_pairs_must_agree():
    d = decide_slowdown([pair(3.0), pair(1.0)], 1.25, SequentialPolicy(min_samples=3))
    assert d.state == TimingState.INCONCLUSIVE and not d.fast


def test_a_110x_slower_step_is_decided_on_one_pair():
    asked = []

    def sample(i):
        asked.append(i)
        return pair(110.0)

    out = sequential_slowdown(sample, 1.25)
    assert out.verdict == Verdict.SLOWDOWN and out.conclusive and out.fast and asked == [0]
    assert out.to_dict()["ratio"] == pytest.approx(110.0)


def test_inconclusive_takes_more_pairs_up_to_the_budget():
    ks = iter([1.6, 1.13, 1.35, 1.14, 1.2] * 4)  # around the threshold, no clear pair
    asked = []

    def sample(i):
        asked.append(i)
        return pair(next(ks))

    out = sequential_slowdown(sample, 1.25, SequentialPolicy(min_samples=3, max_samples=5))
    assert asked == list(range(5)) and out.verdict == Verdict.OK and not out.conclusive
    assert len(out.baseline) == len(out.candidate) == 5 and out.new == 5


def test_the_replay_adds_pairs_to_the_evidence():
    prior = [pair(3.0)]
    asked = []

    def sample(i):
        asked.append(i)
        return pair(3.1)

    out = sequential_slowdown(sample, 1.25, SequentialPolicy(min_new=1), prior=prior)
    assert out.verdict == Verdict.SLOWDOWN and asked == [0] and len(out.pairs) == 2 and out.new == 1
    # a fresh pair that disagrees sends it to the rank test over all the evidence
    out = sequential_slowdown(lambda i: pair(1.0), 1.25, SequentialPolicy(min_new=1, max_samples=6), prior=prior)
    assert out.verdict == Verdict.OK and len(out.pairs) == 7


def test_a_non_timing_verdict_stops_the_comparison():
    out = sequential_slowdown(lambda i: pair(1.3) if i == 0 else Verdict.CRASH, 1.25)
    assert out.verdict == Verdict.CRASH and out.stopped == Verdict.CRASH and len(out.pairs) == 1


def test_outcome_to_dict_is_json():
    import json

    out = sequential_slowdown(lambda i: pair(3.0), 1.25)
    d = json.loads(json.dumps(out.to_dict(), allow_nan=False))
    assert d["verdict"] == "slowdown" and d["fast"] is True and d["pairs"][0]["candidate_steps"] == 60


# The journey's mixed_precision_cpu (a real ~1.4x) at load ~3 on an AMD EPYC
# (J9, 2026-12-02): candidate over baseline typical step, and others_cpu
# during (before, candidate, after). Two clear "not slower" pairs decided it
# healthy; one had the candidate alone on the machine (0.0) beside neighbours
# at 0.65 and 0.50, i.e. the neighbours were the slowed ones.
J9_MIXED = [
    (1.5, (0.444, 0.545, 0.5)),
    (1.492, (0.5, 0.597, 0.513)),
    (1.409, (0.513, 0.604, 0.588)),
    (1.17, (0.588, 0.54, 0.614)),
    (0.989, (0.614, 0.401, 0.651)),
    (0.732, (0.651, 0.0, 0.504)),
    (1.135, (0.504, 0.627, 0.629)),
]


def test_a_clear_pair_counts_only_beside_neighbours_that_saw_a_like_machine():
    got = decide_slowdown([loaded(k, o) for k, o in J9_MIXED], 1.25)
    assert got.state == TimingState.INCONCLUSIVE  # more pairs, not "not slower" (was NOT_SLOWER, fast)
    # the same two clear pairs beside like-loaded neighbours still decide
    alike = [(k, (o[1], o[1], o[1]) if k < 1.0 else o) for k, o in J9_MIXED]
    assert decide_slowdown([loaded(k, o) for k, o in alike], 1.25).state == TimingState.NOT_SLOWER
    # and a clear "slower" pair whose candidate alone was loaded does not count
    hot = [loaded(2.0, (0.1, 0.7, 0.1)), loaded(2.0, (0.1, 0.7, 0.1)), loaded(1.3, (0.1, 0.1, 0.1))]
    assert decide_slowdown(hot, 1.25).state != TimingState.SLOWER
    cool = [loaded(2.0, (0.5, 0.6, 0.5)), loaded(2.0, (0.5, 0.6, 0.5)), loaded(1.3, (0.5, 0.5, 0.5))]
    assert decide_slowdown(cool, 1.25).state == TimingState.SLOWER
    # unknown load: counted as before
    assert loaded(0.7, (0.6, None, 0.6)).load_matched(TimingState.NOT_SLOWER)
