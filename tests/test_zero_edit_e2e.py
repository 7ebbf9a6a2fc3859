"""Zero-edit end to end with real TensorFlow: `tfrepro bisect train.py` on an
unmarked script writes nothing, and preflight drops the feature whose OFF
part breaks the baseline (a layer looked up by name before training)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

TRAIN = textwrap.dedent("""\
    import numpy as np
    import tensorflow as tf
    from tensorflow import keras


    class MyNorm(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.eps = 1e-3

        def call(self, x):
            return x / (tf.norm(x, axis=-1, keepdims=True) + self.eps)


    x = np.random.RandomState(0).rand(128, 4).astype("float32")
    y = (x.sum(1) > 2).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(128, seed=0).batch(32)
    inputs = keras.Input((4,))
    h = MyNorm(name="norm")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    print("norm eps", model.get_layer("norm").eps)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=2)
""")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def test_bisect_an_unmarked_script_drops_a_broken_off_part_and_writes_nothing(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "init")
    r = subprocess.run(
        [sys.executable, "-m", "tfrepro", "bisect", "train.py", "--steps", "3", "--symptom", "nan", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(r.stdout)
    assert doc["detected"] is True
    assert [d["name"] for d in doc["dropped_features"]] == ["custom_layer_my_norm"], r.stderr[-2000:]
    assert "eps" in doc["dropped_features"][0]["reason"]
    assert doc["features"] == ["shuffle"] and doc["affects_loss"] == ["shuffle"]
    assert doc["status"] == "none"
    assert git(tmp_path, "status", "--porcelain") == ""
