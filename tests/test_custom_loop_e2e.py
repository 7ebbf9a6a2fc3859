"""custom_loop end to end: an unedited GradientTape loop with the broadcast of
tensorflow/tensorflow#28901 ((B,) labels against (B, 1) predictions in a
hand-written MSE), printing nothing, is bisected against the fit built from
its own parts (zero-edit mode, then `annotate --write`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tfrepro.cli import main

pytestmark = pytest.mark.e2e

LOOP = """\
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(1)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32")).astype("float32")  # shape (N,)
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)


{decorator}
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        loss = tf.reduce_mean(tf.square({label} - pred))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for xb, yb in ds:
    train_step(xb, yb)
"""


def bisect(tmp_path, label: str, annotate: bool, *extra: str, decorator: str = "") -> dict:
    (tmp_path / "train.py").write_text(LOOP.format(label=label, decorator=decorator))
    (tmp_path / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\nsteps = 8\ntimeout_s = 120\n')
    runner = CliRunner()
    if annotate:
        res = runner.invoke(main, ["annotate", str(tmp_path / "train.py"), "--write"])
        assert res.exit_code == 0, res.output
        assert "# tfrepro: feature custom_loop" in (tmp_path / "train.py").read_text()
    res = runner.invoke(main, ["bisect", str(tmp_path), "--json", *extra])
    return json.loads(res.stdout)


@pytest.mark.parametrize("annotate", [False, True], ids=["zero-edit", "annotate"])
def test_the_broadcast_loop_is_a_custom_loop_mismatch(tmp_path, annotate):
    out = bisect(tmp_path, "yb", annotate)
    assert out["status"] == "found" and out["symptom"] == "mismatch", out
    assert out["culprits"] == ["custom_loop"]


@pytest.mark.parametrize("decorator", ["", "@tf.function"], ids=["eager", "tf.function"])
def test_a_correct_loop_matches_its_fit_exactly(tmp_path, decorator):
    # The mismatch is what is asked here (a timing comparison under a shared CPU's load is not a test).
    if decorator:  # the two runs only (the bisect is the eager case's)
        (tmp_path / "train.py").write_text(LOOP.format(label="yb[:, None]", decorator=decorator))
        (tmp_path / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\nsteps = 8\ntimeout_s = 120\n')
    else:
        out = bisect(tmp_path, "yb[:, None]", False, "--symptom", "mismatch")
        assert out["status"] == "none", out
    runner = CliRunner()
    on = ["custom_loop", "tf_function"] if decorator else ["custom_loop"]
    off = ["--with", ",".join(on[1:])] if decorator else ["--none"]
    loop = json.loads(runner.invoke(main, ["run", str(tmp_path), "--with", ",".join(on), "--json"]).stdout)
    fit = json.loads(runner.invoke(main, ["run", str(tmp_path), *off, "--json"]).stdout)
    assert loop["mode"] == "loop" and fit["mode"] == "fit"
    assert loop["losses"] == fit["losses"] and len(loop["losses"]) == 8
    # fit ran in the loop's compile mode: eager for an eager step, the graph (no XLA) for a tf.function
    assert [m["run_eagerly"] for m in fit["compile_modes"]] == [not decorator] * 2, fit["compile_modes"]
