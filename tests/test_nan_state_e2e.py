"""The late step and the NaN state in real TensorFlow trials (a 1-layer
model, 8 steps): a trial run until its symptom passes its step cap; the
nan-state trial saves the state before the NaN step and its batch; the
report's replay.py, alone in a directory with repro.py, shows the NaN in
one step."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tfrepro.project import Project
from tfrepro.report.tables import write_replay
from tfrepro.trials.runner import run_trial
from tfrepro.trials.trial import TrialOptions

pytestmark = pytest.mark.e2e

SCRIPT = """\
import keras
import numpy as np

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
x[40] = 1e30  # in the batch of step 6 (batch size 8, no shuffle)
y = x.sum(axis=1)
model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("late") / "proj"
    root.mkdir()
    (root / "repro.py").write_text(SCRIPT)
    (root / "tfrepro.toml").write_text('[trial]\nentry = "repro.py"\nsteps = 2\ntimeout_s = 120\n')
    return Project.load(root)


def test_run_until_symptom_passes_the_step_cap(project, tmp_path):
    settings = replace(project.manifest.trial, until_symptom=True, budget_s=60.0)
    got = run_trial(project, [], settings, TrialOptions(state_dir=tmp_path / "state", use_cache=False))
    assert got.first_nonfinite_step == 6 and got.steps_run == 6, got
    capped = run_trial(project, [], project.manifest.trial, TrialOptions(state_dir=tmp_path / "state", use_cache=False))
    assert capped.steps_run == 2 and capped.first_nonfinite_step is None


def test_nan_state_and_its_one_step_replay(project, tmp_path):
    settings = replace(project.manifest.trial, steps=6, save_state_step=6)
    got = run_trial(project, [], settings, TrialOptions(state_dir=tmp_path / "state", use_cache=False))
    assert got.first_nonfinite_step == 6, got
    saved = Path(got.log_dir) / "nan_state"
    meta = json.loads((saved / "state.json").read_text())
    assert meta["step"] == 6 and len(meta["weights"]) == 4 and meta["optimizer"]
    assert meta["batch"]["0"] == [[8, 3], "float32"]
    run_dir = tmp_path / "run"
    shutil.copytree(saved, run_dir / "nan_state")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(project.root / "repro.py", bundle / "repro.py")
    wrote = write_replay(bundle, run_dir, {"nan_state": {"step": 6, "dir": "nan_state"}})
    assert "replay.py" in wrote
    alone = tmp_path / "alone"
    shutil.copytree(bundle, alone)
    proc = subprocess.run(
        [sys.executable, "replay.py"], cwd=alone, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "replayed step 6 from the saved state: loss = " in proc.stdout
    assert proc.stdout.split("loss = ")[-1].split()[0] in ("nan", "inf")


def test_no_replay_without_a_saved_state(tmp_path):
    assert write_replay(tmp_path, tmp_path, {"nan_state": None}) == {}
    assert write_replay(tmp_path, tmp_path, {"nan_state": {"step": 3, "dir": "nan_state"}}) == {}
    assert not (tmp_path / "replay.py").exists()
