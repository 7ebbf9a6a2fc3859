"""--replicas N and what actually ran, for real: the CLI, trial processes, TensorFlow.

1. A custom loop under MirroredStrategy whose per-replica mean loss is summed
   across replicas (the loss and the gradients double with 2 replicas). On
   this one-CPU-device machine, `bisect --replicas 2` names the strategy
   (mismatch); without it the answer says only one replica was available
   and how to get more; the report's repro.py, run alone, shows the doubled
   loss.
2. A fit under MirroredStrategy with the default jit_compile ("auto"), where
   "auto" is made to resolve as Keras 3 does on a GPU (XLA only without a
   strategy; the CPU would resolve it to no XLA either way): every trial says
   which compile mode ran, and toggling the strategy leaves it unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

LOOP = """\
import numpy as np
import tensorflow as tf
import keras

# tfrepro: feature mirrored_strategy -- one replica per device
# strategy = tf.distribute.MirroredStrategy()
# tfrepro: else
strategy = tf.distribute.get_strategy()
# tfrepro: end
rng = np.random.RandomState(0)
x = rng.randn(64, 4).astype("float32")
y = x @ np.ones((4, 1), "float32")
batches = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()))
with strategy.scope():
    w = tf.Variable(tf.zeros((4, 1)))
    opt = keras.optimizers.SGD(0.01)


@tf.function
def train_step(batch):
    def replica_step(b):
        xb, yb = b
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)  # this replica's mean
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    # the bug: per-replica means summed (they should be scaled by the global batch)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(batch,)), axis=None)


for step in range(1, 7):
    print(f"step={step} loss={float(train_step(next(batches))):.6f}")
"""

FIT = """\
import numpy as np
import tensorflow as tf
import keras
from keras.src.trainers import trainer

# Stand in for a GPU: Keras 3 resolves jit_compile="auto" to XLA only when no
# distribution strategy is active (the CPU resolves it to no XLA anyway).
trainer.Trainer._resolve_auto_jit_compile = lambda self: not self._distribute_strategy

# tfrepro: feature mirrored_strategy -- one replica per device
# strategy = tf.distribute.MirroredStrategy()
# tfrepro: else
strategy = tf.distribute.get_strategy()
# tfrepro: end
x = np.random.RandomState(0).randn(64, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=16, epochs=1, verbose=0)
"""


def tfrepro(cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfrepro", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def project(tmp_path: Path, name: str, script: str, toml: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "train.py").write_text(script)
    (d / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\n' + toml)
    return d


def losses(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"^step=\d+ loss=(\S+)$", text, re.M)]


def test_a_summed_per_replica_loss_is_found_with_replicas_and_explained_without(tmp_path):
    d = project(tmp_path, "loop", LOOP, "steps = 6\ntimeout_s = 240\n")

    # This machine has one CPU device: one replica, so the summed loss is the
    # loss itself (a one-replica MirroredStrategy is only slower: a known cost).
    plain = tfrepro(d, "bisect", "--symptom", "mismatch", "--replays", "1")
    assert plain.returncode == 3, plain.stderr[-3000:]
    assert "none:" in plain.stdout
    assert "note: only one replica was available" in plain.stdout and "--replicas 2" in plain.stdout

    two = tfrepro(d, "bisect", "--json", "--replicas", "2", "--replays", "1")
    assert two.returncode == 0, two.stderr[-3000:]
    doc = json.loads(two.stdout)
    assert (doc["status"], doc["symptom"], doc["culprits"]) == ("found", "mismatch", ["mirrored_strategy"])
    failing, baseline = doc["failing"], doc["baseline"]
    assert failing["replicas_in_sync"] == 2 and len(failing["devices"]) == 2
    assert failing["losses"][0] == pytest.approx(2 * baseline["losses"][0], rel=1e-5)  # the loss doubled
    assert doc["settings"]["replicas"] == 2

    rep = tfrepro(d, "report", "--no-localize", "--no-rerun", "--json")
    assert rep.returncode == 0, rep.stderr[-3000:]
    bundle = Path(json.loads(rep.stdout)["bundle"])
    script = (bundle / "repro.py").read_text()
    assert "# Added by tfrepro (--replicas 2)" in script
    alone = subprocess.run(
        [sys.executable, "repro.py"], cwd=bundle, capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert losses(alone.stdout)[0] == pytest.approx(2 * baseline["losses"][0], rel=1e-5)


def test_every_trial_says_which_compile_mode_ran_and_the_strategy_does_not_toggle_xla(tmp_path):
    d = project(tmp_path, "fit", FIT, "steps = 4\ndeterministic = false\ntimeout_s = 240\n")
    got = tfrepro(d, "bisect", "--json", "--replicas", "2", "--replays", "1")
    assert got.returncode in (0, 3, 4), got.stderr[
        -3000:
    ]  # deterministic = false: the answer may vary; what ran may not
    doc = json.loads(got.stdout)
    assert doc["failing"]["replicas_in_sync"] == 2
    run_dir = d / doc["run_dir"] if not Path(doc["run_dir"]).is_absolute() else Path(doc["run_dir"])
    trials = {r["summary"]: r for r in doc["trials_table"]}
    kept = []
    for rel, row in trials.items():
        summary = json.loads((run_dir / rel).read_text())
        fits = [m for m in summary["compile_modes"] if m["call"].startswith("fit#")]
        compiles = [m for m in summary["compile_modes"] if m["call"].startswith("compile#")]
        assert fits and compiles and compiles[0]["requested"] == "auto"  # every trial says what ran
        if compiles[0]["pinned"] or row["enabled"] == ["mirrored_strategy"]:
            kept.append((row["enabled"], fits[0]["jit_compile"]))
    # the failing configuration resolved "auto" to no XLA (a strategy is on);
    # every trial without the strategy ran pinned to the same: no XLA either
    assert {jit for _, jit in kept} == {False}
    assert any(enabled == [] for enabled, _ in kept)
    assert doc["compile_differs"] == []
