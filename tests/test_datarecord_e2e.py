"""What the data is, recorded in a real TensorFlow trial: np.load, open() of a
CSV and a TFRecordDataset named with the script's file:line; a tf.data fit's
element spec, batches per epoch and the statistics of the batches it saw."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tfrepro.project import Project
from tfrepro.trials.runner import run_trial
from tfrepro.trials.trial import TrialOptions

pytestmark = pytest.mark.e2e

SCRIPT = """\
import keras
import numpy as np
import tensorflow as tf

x = np.load("data/x.npy")
with open("data/labels.csv") as f:
    y = np.array([float(line) for line in f.read().split()], dtype="float32")
with tf.io.TFRecordWriter("extra.tfrecord") as w:
    w.write(b"")
tf.data.TFRecordDataset("extra.tfrecord")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(ds, epochs=1, verbose=0)
"""


def test_sources_and_a_datasets_spec_and_stats(tmp_path):
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    x = np.zeros((32, 2), dtype=np.float32)
    x[:, 1] = np.arange(32)
    np.save(root / "data" / "x.npy", x)
    (root / "data" / "labels.csv").write_text("\n".join(str(i % 2) for i in range(32)))
    (root / "repro.py").write_text(SCRIPT)
    (root / "tfrepro.toml").write_text('[trial]\nentry = "repro.py"\nsteps = 50\ntimeout_s = 120\n')
    project = Project.load(root)
    settings = replace(project.manifest.trial, until_symptom=True, budget_s=30.0)  # records the batches
    got = run_trial(project, [], settings, TrialOptions(state_dir=tmp_path / "state", use_cache=False))
    assert got.steps_run == 4, got
    sources = {(s["call"], s["file"]): s for s in got.data["sources"]}
    assert sources[("numpy.load", "data/x.npy")]["at"] == "repro.py:5"
    assert sources[("numpy.load", "data/x.npy")]["shape"] == [32, 2]
    assert sources[("open", "data/labels.csv")]["at"] == "repro.py:6"
    assert sources[("tf.data.TFRecordDataset", "extra.tfrecord")]["at"] == "repro.py:10"
    fit = got.data["fits"][0]
    assert (fit["kind"], fit["at"], fit["batches_per_epoch"]) == ("tf.data", "repro.py:14", 4)
    assert fit["element_spec"] == [{"shape": [None, 2], "dtype": "float32"}, {"shape": [None], "dtype": "float32"}]
    assert fit["features"]["x[:, 1]"]["max"] == 31.0 and fit["features"]["x[:, 0]"]["zero_frac"] == 1.0
    assert fit["features"]["y"]["count"] == 32
