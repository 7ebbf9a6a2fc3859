"""The classifier, with fakes (no TF, no clock); the slowdown statistics are in test_timing*.py."""

from __future__ import annotations

import math

import pytest

from tfrepro.settings import SymptomSettings
from tfrepro.trials.classify import (
    loss_deviation,
    measure_noise,
    mismatch_tolerance,
    primary,
    symptoms,
)
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

S = SymptomSettings()
LOSSES = tuple(2.3 * 0.95**i for i in range(20))


def trial(**kw) -> TrialResult:
    kw.setdefault("losses", LOSSES)
    kw.setdefault("mode", "fit")
    return TrialResult(**kw)


BASE = trial()


def test_healthy_trial_is_ok():
    assert primary(symptoms(trial(), reference=BASE, settings=S)) == Verdict.OK


def test_nan_in_loss_or_weights():
    nan_loss = trial(losses=LOSSES[:5] + (math.nan,), first_nonfinite_step=6)
    assert primary(symptoms(nan_loss, reference=BASE, settings=S)) == Verdict.NAN
    # a ReLU hid the NaN from the loss; the weights still tell
    hidden = trial(weights_finite=False, nonfinite_weights=("dense/kernel",))
    assert primary(symptoms(hidden, reference=BASE, settings=S)) == Verdict.NAN


def test_nan_not_a_symptom_when_disabled():
    nan_loss = trial(losses=LOSSES[:5] + (math.nan,), first_nonfinite_step=6)
    off = SymptomSettings(nan=False)
    assert primary(symptoms(nan_loss, reference=None, settings=off)) == Verdict.OK


def test_crash_and_timeout():
    assert primary(symptoms(trial(crashed=True, exit_code=1), reference=BASE, settings=S)) == Verdict.CRASH
    t = trial(timed_out=True, losses=LOSSES[:3])
    assert primary(symptoms(t, reference=BASE, settings=S)) == Verdict.TIMEOUT


def test_nan_and_crash_together_and_the_lock():
    both = trial(losses=(1.0, math.inf), first_nonfinite_step=2, crashed=True)
    shown = symptoms(both, reference=BASE, settings=S)
    assert shown == {Verdict.NAN, Verdict.CRASH}
    assert primary(symptoms(both, reference=BASE, settings=S)) == Verdict.NAN
    # hunting the crash, the same trial counts as the crash
    assert primary(symptoms(both, reference=BASE, settings=S), Verdict.CRASH) == Verdict.CRASH


def test_mismatch_against_reference_and_tolerance():
    off_by_10 = trial(losses=tuple(x * 1.10 for x in LOSSES))
    off_by_1 = trial(losses=tuple(x * 1.01 for x in LOSSES))
    assert primary(symptoms(off_by_10, reference=BASE, settings=S)) == Verdict.MISMATCH
    assert primary(symptoms(off_by_1, reference=BASE, settings=S)) == Verdict.OK
    # no reference: no mismatch judgement at all
    assert primary(symptoms(off_by_10, reference=None, settings=S)) == Verdict.OK


def test_tolerance_never_falls_below_measured_noise():
    noisy_again = trial(losses=tuple(x * (1.12 if i % 2 else 0.9) for i, x in enumerate(LOSSES)))
    noise = measure_noise(BASE, noisy_again)
    assert noise == pytest.approx(0.12)
    assert mismatch_tolerance(S, noise) == pytest.approx(0.12)
    off_by_10 = trial(losses=tuple(x * 1.10 for x in LOSSES))
    assert primary(symptoms(off_by_10, reference=BASE, settings=S, noise=noise)) == Verdict.OK
    assert mismatch_tolerance(S, 0.0) == S.mismatch


def test_loss_deviation_details():
    assert loss_deviation((), LOSSES) == 0.0
    assert loss_deviation(LOSSES[:3], LOSSES) == 0.0  # common prefix only
    assert loss_deviation((1.0, math.nan), (1.0, 1.0)) == math.inf
    # a loss converging to 0 does not blow up the relative deviation
    ref = (1.0, 0.5, 1e-9)
    assert loss_deviation((1.0, 0.5, 2e-9), ref) < 1e-5
