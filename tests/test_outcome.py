"""The classifier and the slowdown statistics, with fakes (no TF, no clock)."""

from __future__ import annotations

import math
import random

import pytest

from tfrepro.settings import SymptomSettings
from tfrepro.trials.classify import (
    TimingState,
    classify,
    decide_slowdown,
    loss_deviation,
    measure_noise,
    mismatch_tolerance,
    rank_test_greater,
    sequential_slowdown,
    symptoms,
)
from tfrepro.trials.values import TrialResult, Verdict

S = SymptomSettings()
LOSSES = tuple(2.3 * 0.95**i for i in range(20))


def trial(**kw) -> TrialResult:
    kw.setdefault("losses", LOSSES)
    kw.setdefault("mode", "fit")
    return TrialResult(**kw)


BASE = trial()


def test_healthy_trial_is_ok():
    assert classify(trial(), reference=BASE, settings=S) == Verdict.OK


def test_nan_in_loss_or_weights():
    nan_loss = trial(losses=LOSSES[:5] + (math.nan,), first_nonfinite_step=6)
    assert classify(nan_loss, reference=BASE, settings=S) == Verdict.NAN
    # a ReLU hid the NaN from the loss; the weights still tell
    hidden = trial(weights_finite=False, nonfinite_weights=("dense/kernel",))
    assert classify(hidden, reference=BASE, settings=S) == Verdict.NAN


def test_nan_not_a_symptom_when_disabled():
    nan_loss = trial(losses=LOSSES[:5] + (math.nan,), first_nonfinite_step=6)
    off = SymptomSettings(nan=False)
    assert classify(nan_loss, reference=None, settings=off) == Verdict.OK


def test_crash_and_timeout():
    assert classify(trial(crashed=True, exit_code=1), reference=BASE, settings=S) == Verdict.CRASH
    t = trial(timed_out=True, losses=LOSSES[:3])
    assert classify(t, reference=BASE, settings=S) == Verdict.TIMEOUT


def test_nan_and_crash_together_and_the_lock():
    both = trial(losses=(1.0, math.inf), first_nonfinite_step=2, crashed=True)
    shown = symptoms(both, reference=BASE, settings=S)
    assert shown == {Verdict.NAN, Verdict.CRASH}
    assert classify(both, reference=BASE, settings=S) == Verdict.NAN
    # hunting the crash, the same trial counts as the crash
    assert classify(both, reference=BASE, settings=S, target=Verdict.CRASH) == Verdict.CRASH


def test_mismatch_against_reference_and_tolerance():
    off_by_10 = trial(losses=tuple(x * 1.10 for x in LOSSES))
    off_by_1 = trial(losses=tuple(x * 1.01 for x in LOSSES))
    assert classify(off_by_10, reference=BASE, settings=S) == Verdict.MISMATCH
    assert classify(off_by_1, reference=BASE, settings=S) == Verdict.OK
    # no reference: no mismatch judgement at all
    assert classify(off_by_10, reference=None, settings=S) == Verdict.OK


def test_tolerance_never_falls_below_measured_noise():
    noisy_again = trial(losses=tuple(x * (1.12 if i % 2 else 0.9) for i, x in enumerate(LOSSES)))
    noise = measure_noise(BASE, noisy_again)
    assert noise == pytest.approx(0.12)
    assert mismatch_tolerance(S, noise) == pytest.approx(0.12)
    off_by_10 = trial(losses=tuple(x * 1.10 for x in LOSSES))
    assert classify(off_by_10, reference=BASE, settings=S, noise=noise) == Verdict.OK
    assert mismatch_tolerance(S, 0.0) == S.mismatch


def test_loss_deviation_details():
    assert loss_deviation((), LOSSES) == 0.0
    assert loss_deviation(LOSSES[:3], LOSSES) == 0.0  # common prefix only
    assert loss_deviation((1.0, math.nan), (1.0, 1.0)) == math.inf
    # a loss converging to 0 does not blow up the relative deviation
    ref = (1.0, 0.5, 1e-9)
    assert loss_deviation((1.0, 0.5, 2e-9), ref) < 1e-5


# --------------------------------------------------------------------------- timing


def test_rank_test_exact_smallest_p():
    rng = random.Random(0)
    assert rank_test_greater([4, 5, 6], [1, 2, 3], rng=rng) == pytest.approx(1 / 20)
    assert rank_test_greater([1, 2, 3], [4, 5, 6], rng=rng) == pytest.approx(1.0)
    # Monte Carlo path for large samples, seeded
    big_hi = [10 + i for i in range(12)]
    big_lo = [i for i in range(12)]
    assert rank_test_greater(big_hi, big_lo, rng=rng) < 0.001


def test_decide_slowdown_states():
    rng = random.Random(1)
    assert decide_slowdown([1.0, 1.01, 0.99], [1.5, 1.52, 1.49], 1.25, rng=rng).state == TimingState.SLOWER
    assert decide_slowdown([1.0, 1.01, 0.99], [1.0, 0.98, 1.02], 1.25, rng=rng).state == TimingState.NOT_SLOWER
    # significantly slower, but under the threshold: not a slowdown
    d = decide_slowdown([1.0, 1.01, 0.99], [1.1, 1.11, 1.09], 1.25, rng=rng)
    assert d.state == TimingState.NOT_SLOWER
    # above the ratio but overlapping samples: not significant yet
    d = decide_slowdown([1.0, 2.0, 1.0], [1.3, 1.3, 0.9], 1.25, rng=rng)
    assert d.state == TimingState.INCONCLUSIVE


def noisy_sampler(ratio: float, seed: int, *, cv: float = 0.08, spike_p: float = 0.1, drift: float = 0.01):
    """Realistic step-time medians: lognormal noise, occasional 2x spikes
    (another process on the machine), slow drift over time that hits baseline
    and candidate alike because they are interleaved."""
    rng = random.Random(seed)
    calls = []

    def one(level: float, t: int) -> float:
        x = 0.020 * level * (1 + drift * t) * math.exp(rng.gauss(0, cv))
        return x * 2 if rng.random() < spike_p else x

    def sample(i: int):
        calls.append(i)
        return one(1.0, 2 * i), one(ratio, 2 * i + 1)

    return sample, calls


@pytest.mark.parametrize("seed", range(20))
def test_a_1_5x_slowdown_with_realistic_noise_is_found(seed):
    sample, calls = noisy_sampler(1.5, seed)
    out = sequential_slowdown(sample, 1.25, rng=random.Random(seed), max_samples=10)
    assert out.verdict == Verdict.SLOWDOWN and out.conclusive
    assert calls == list(range(len(calls)))  # pairs asked in order, deterministic indices


def test_a_vs_a_never_reports_a_slowdown():
    for seed in range(20):
        sample, _ = noisy_sampler(1.0, 1000 + seed)
        out = sequential_slowdown(sample, 1.25, rng=random.Random(seed))
        assert out.verdict == Verdict.OK, seed


def test_inconclusive_takes_more_samples_up_to_the_budget():
    # overlapping samples around the threshold never become conclusive
    seq = iter([(1.0, 1.3), (1.3, 1.25), (1.2, 1.45)] * 10)
    asked = []

    def sample(i):
        asked.append(i)
        return next(seq)

    out = sequential_slowdown(sample, 1.25, min_samples=3, max_samples=7, rng=random.Random(0))
    assert len(asked) == 7
    assert out.verdict == Verdict.OK and not out.conclusive
    assert len(out.baseline) == len(out.candidate) == 7


def test_clear_cases_stop_at_min_samples():
    asked = []

    def sample(i):
        asked.append(i)
        return (1.0 + 0.01 * i, 3.0 + 0.01 * i)

    out = sequential_slowdown(sample, 1.25, rng=random.Random(0))
    assert out.verdict == Verdict.SLOWDOWN and len(asked) == 3
    d = out.to_dict()
    assert d["baseline"] == [1.0, 1.01, 1.02] and d["p_value"] == pytest.approx(0.05)


def test_a_non_timing_verdict_stops_the_comparison():
    def sample(i):
        return (1.0, 2.0) if i == 0 else Verdict.CRASH

    out = sequential_slowdown(sample, 1.25, rng=random.Random(0))
    assert out.verdict == Verdict.CRASH and out.stopped == Verdict.CRASH


def test_timing_sample_ignores_warmup_and_contended_steps():
    from tfrepro.trials.classify import timing_sample

    # warm-up 3 steps of tracing, then 1 ms steps, some stretched by another process
    steps = (0.9, 0.5, 0.4) + (0.001,) * 12 + (0.008,) * 8
    t = trial(step_times=steps)
    assert timing_sample(t) == pytest.approx(0.001)
    assert t.median_step_time() == pytest.approx(0.001)
    contended = trial(step_times=(0.9, 0.5, 0.4) + (0.001,) * 8 + (0.008,) * 12)
    assert contended.median_step_time() == pytest.approx(0.008)  # the median moved ...
    assert timing_sample(contended) == pytest.approx(0.001)  # ... the fast steps did not
    slower = trial(step_times=(0.9, 0.5, 0.4) + (0.0015,) * 20)
    assert timing_sample(slower) / timing_sample(t) == pytest.approx(1.5)
    assert timing_sample(trial(step_times=(0.9, 0.5, 0.4, 0.001))) is None
