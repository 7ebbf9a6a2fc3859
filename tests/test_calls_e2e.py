"""Issue 26, end to end: every fit of a script is a step source, and a timing
trial times the call it is asked to (a real TensorFlow trial, a few seconds)."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from tfrepro.project import Project
from tfrepro.settings import WARMUP_STEPS
from tfrepro.trials.classify import calls_of
from tfrepro.trials.runner import run_trial
from tfrepro.trials.trial import TrialOptions

SCRIPT = textwrap.dedent(
    """\
    import numpy as np
    from tensorflow import keras

    x = np.ones((64, 4), "float32")
    y = np.zeros((64, 1), "float32")
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    print("after the fits")
    """
)


@pytest.mark.e2e
def test_each_fit_is_recorded_and_a_timing_trial_times_the_call_it_is_given(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(SCRIPT)
    (root / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\nsteps = 50\n')
    p = Project.load(root, detect=False)
    plain = run_trial(p, [], p.manifest.trial, TrialOptions(state_dir=tmp_path / "state", use_cache=False))
    assert [(c.tag, c.where, c.start, c.end) for c in calls_of(plain)] == [
        ("fit#1", "train.py:8", 0, 4),
        ("fit#2", "train.py:9", 4, 12),
        ("fit#3", "train.py:10", 12, 16),
    ]
    timing = replace(p.manifest.trial.timed(budget_s=30.0, min_steps=1000, steps_max=5000), timed_calls=("fit#2",))
    timed = run_trial(p, [], timing, TrialOptions(state_dir=tmp_path / "state", use_cache=False))
    # fit#2's steps past its own warm-up, and the trial ends with fit#2 (fit#3 never runs)
    warm = WARMUP_STEPS
    assert timed.extra["timed_ranges"] == [[4 + warm, 12]]
    assert timed.steady_step_times() == timed.step_times[4 + warm : 12]
    assert timed.extra["stop"] == "fit ended (timing trial)" and timed.steps_run == 12
