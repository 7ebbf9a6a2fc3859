"""Custom loops measured with no print format (inside/harness_loop.py): a real
`tfrepro run --json` per loop form, one TensorFlow process each.

The loop writes its own loss of every step it finishes to own_losses.txt;
the trial stops inside step `steps` (at its apply_gradients, or right after
the tf.function call that ran it), so the file holds steps - 1 losses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.cli import main
from tfrepro.trials.values import TrialResult

pytestmark = pytest.mark.e2e
STEPS = 6


@pytest.fixture(autouse=True)
def _keep_the_trial_copy(monkeypatch):
    """The loop's own losses are in its trial copy, which tfrepro removes once
    the result is stored (trials/state.py) unless asked to keep it."""
    monkeypatch.setenv("TFREPRO_KEEP_VARIANTS", "1")


LOOP = """\
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
{poison}
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)


{decorator}
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(yb - model(xb, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    {tf_print}
    return loss


for epoch in range(3):
    for b in range(0, 64, 8):
        loss = train_step(x[b : b + 8], y[b : b + 8])
        with open("own_losses.txt", "a") as f:
            f.write(repr(float(loss)) + "\\n")
        {py_print}
"""

MIRRORED = """\
import numpy as np
import tensorflow as tf
import keras

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL_BATCH = 16
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
keras.utils.set_random_seed(0)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05)
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
it = iter(strategy.experimental_distribute_dataset(ds))


def replica_step(xb, yb):
    with tf.GradientTape() as tape:
        per_example = tf.reduce_mean(tf.square(yb - model(xb, training=True)), axis=-1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def train_step(xb, yb):
    return strategy.reduce("SUM", strategy.run(replica_step, args=(xb, yb)), axis=None)


for _ in range(20):
    loss = train_step(*next(it))
    with open("own_losses.txt", "a") as f:
        f.write(repr(float(loss)) + "\\n")
"""

DECORATORS = {"eager": "", "tf_function": "@tf.function", "jit": "@tf.function(jit_compile=True)"}
PRINTS = {
    "own": ("", 'print(f"Epoch {epoch + 1}/3 - batch {b // 8} - loss: {float(loss):.4f}")'),
    "tf_print": ('tf.print("loss:", loss)', ""),
    "none": ("", ""),
}


def loop_script(form: str, printing: str, poison: str = "") -> str:
    tf_print, py_print = PRINTS[printing]
    return LOOP.format(decorator=DECORATORS[form], tf_print=tf_print, py_print=py_print, poison=poison)


def run_json(tmp_path: Path, script: str, steps: int = STEPS) -> TrialResult:
    (tmp_path / "train.py").write_text(script)
    (tmp_path / "tfrepro.toml").write_text(f'[trial]\nentry = "train.py"\nsteps = {steps}\ntimeout_s = 120\n')
    # --all: zero-edit mode detects the tf.function / jit_compile decorator; run it as written
    res = CliRunner().invoke(main, ["run", str(tmp_path), "--all", "--json"])
    assert res.exit_code in (0, 1), res.output
    return TrialResult.from_dict(json.loads(res.stdout))


def own_losses(result: TrialResult) -> list[float]:
    path = Path(result.log_dir) / "variant" / "own_losses.txt"
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def assert_close(got, want, rel=1e-6):
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=rel), (got, want)


@pytest.mark.parametrize(
    ("form", "printing"),
    [("eager", "own"), ("tf_function", "tf_print"), ("jit", "none"), ("tf_function", "none")],
)
def test_loop_losses_are_the_loops_own_and_stop_at_steps(tmp_path, form, printing):
    r = run_json(tmp_path, loop_script(form, printing))
    assert not r.crashed and r.mode == "loop" and r.steps_run == STEPS, r
    assert r.extra["loop_loss_source"] == "apply" and r.extra["stop"] == "steps"
    own = own_losses(r)
    assert len(own) == STEPS - 1  # stopped inside step STEPS, before the loop wrote it
    assert_close(r.losses[: STEPS - 1], own)
    assert len(r.losses) == STEPS and len(r.step_times) == STEPS and all(t > 0 for t in r.step_times)
    assert r.extra.get("loop_traced_steps", []) == ([] if form == "eager" else [1])
    assert r.weights_finite is True


def test_a_nan_loss_stops_the_loop_at_its_first_step(tmp_path):
    r = run_json(tmp_path, loop_script("tf_function", "none", poison="y[40, 0] = np.nan"), steps=20)
    assert r.first_nonfinite_step == 6 and r.steps_run == 6 and r.extra["stop"] == "nonfinite"
    assert all(math.isfinite(x) for x in r.losses[:5]) and math.isnan(r.losses[5])
    assert_close(r.losses[:5], own_losses(r))


def test_strategy_run_losses_are_the_replicas_sum_and_each_replicas(tmp_path):
    r = run_json(tmp_path, MIRRORED, steps=4)
    assert not r.crashed and r.steps_run == 4, r
    assert_close(r.losses[:3], own_losses(r))
    per_replica = r.extra["loop_replica_losses"]
    assert len(per_replica) == 4 and all(len(p) == 2 for p in per_replica)
    assert_close([sum(p) for p in per_replica], r.losses)
