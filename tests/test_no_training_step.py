"""Issue 24: a run with no training step is never judged healthy. A baseline
that exits before its first step is `untestable` ("no training step ran", Contract 4), as
`run --expect` says 125; a feature that makes the script exit cleanly after 3
of the baseline's 40 steps is found (a crash: the training did not finish)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PY = sys.executable

EXITS_BEFORE_FIT = """\
import sys
# tfrepro: feature quiet -- demo
QUIET = True
# tfrepro: else
# QUIET = False
# tfrepro: end
sys.exit(0)
for i in range(1, 41):
    print(f"step={i} loss={1.0 / i}")
"""

EXITS_AFTER_3 = """\
import sys
# tfrepro: feature early_stop -- demo
STOP = 3
# tfrepro: else
# STOP = None
# tfrepro: end
# tfrepro: feature other -- demo
X = 1
# tfrepro: else
# X = 0
# tfrepro: end
for i in range(1, 41):
    print(f"step={i} loss={1.0 / i}")
    if STOP and i == STOP:
        sys.exit(0)
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([PY, "-m", "tfrepro", *args], capture_output=True, text=True, env=env, timeout=300)


def project(tmp_path: Path, script: str) -> Path:
    (tmp_path / "repro.py").write_text(script)
    return tmp_path


@pytest.mark.e2e
def test_a_baseline_without_a_training_step_is_untestable_not_healthy(tmp_path):
    root = project(tmp_path, EXITS_BEFORE_FIT)

    r = cli("bisect", str(root), "--steps", "40", "--json")
    expect = cli("run", str(root), "--steps", "40", "--expect", "nan")

    doc = json.loads(r.stdout)
    assert doc["status"] == "untestable" and "no training step ran" in doc["reason"], doc
    assert r.returncode == 5
    assert expect.returncode == 125


@pytest.mark.e2e
def test_a_feature_that_exits_after_3_of_40_steps_is_found(tmp_path):
    root = project(tmp_path, EXITS_AFTER_3)

    r = cli("bisect", str(root), "--steps", "40", "--json")

    doc = json.loads(r.stdout)
    assert doc["status"] == "found" and doc["culprits"] == ["early_stop"], doc
    assert r.returncode == 0


def stopped_early(result, good, steps=10**9):
    """`ends.early_exit` of a trial that showed nothing: a crash when it stopped early."""
    from tfrepro.bisect.ends import early_exit
    from tfrepro.verdicts import Verdict

    return early_exit(frozenset(), result, good, steps) == {Verdict.CRASH}


def test_stopped_early_and_no_training_step_are_pure_judgements():
    from tfrepro.trials.classify import no_step_reason
    from tfrepro.trials.values import TrialResult

    base = TrialResult(losses=(1.0,) * 40, steps_run=40)
    short = TrialResult(losses=(1.0,) * 3, steps_run=3, exit_code=0)
    assert stopped_early(short, base) and stopped_early(short, base, steps=10)
    assert not stopped_early(short, base, steps=3)  # 3 steps were all that was asked
    assert not stopped_early(TrialResult(steps_run=3, crashed=True), base)  # a crash says so itself
    assert not stopped_early(base, base) and not stopped_early(short, None)
    assert no_step_reason([TrialResult(exit_code=0)], "x") and no_step_reason([TrialResult(crashed=True)], "x") is None


def test_a_fit_stopped_by_the_scripts_callback_did_not_stop_early():
    from tfrepro.trials.values import TrialResult

    base = TrialResult(steps_run=40, losses=[1.0] * 40)
    stopped = TrialResult(steps_run=12, losses=[1.0] * 12, extra={"callback_stops": ["fit#1"]})
    assert not stopped_early(stopped, base)
    assert stopped_early(TrialResult(steps_run=12, losses=[1.0] * 12), base)  # the same, no callback: early


EARLY_STOPPING_CALLBACK = """\
import numpy as np
import keras


class StopAfter(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            self.model.stop_training = True


x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[StopAfter()])
"""


@pytest.mark.e2e
def test_a_stopping_callback_is_not_a_crash(tmp_path):
    """The keras-io callbacks guide's EarlyStoppingAtMinLoss ends fit early on
    purpose: with it ON the script runs fewer steps than the baseline, which is
    the script's own logic, not a crash (it was `crash ← callback_...`)."""
    (tmp_path / "train.py").write_text(EARLY_STOPPING_CALLBACK)

    r = cli("bisect", str(tmp_path / "train.py"), "--symptom", "crash", "--json")

    doc = json.loads(r.stdout)
    assert "callback_stop_after" in doc["features"], doc["features"]
    assert doc["status"] == "none", doc


def test_a_trial_the_harness_stopped_did_not_stop_early():
    """A timing trial of an 80x slower configuration ends at its time budget
    after 33 of 40 steps: that is tfrepro's doing, not the script's (eager_debug
    was answered `none` after it was judged a crash)."""
    from tfrepro.trials.values import TrialResult

    base = TrialResult(steps_run=40, losses=[1.0] * 40, extra={"stop": "steps"})
    for reason in ("budget", "steps", "budget_s", "fit ended (timing trial)"):
        assert not stopped_early(TrialResult(steps_run=33, losses=[1.0] * 33, extra={"stop": reason}), base), reason
    assert stopped_early(TrialResult(steps_run=33, losses=[1.0] * 33, extra={"stop": "exit"}), base)
