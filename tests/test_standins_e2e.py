"""Issue 26: a layer's OFF stand-in checked against how the layer is called:
a custom layer over a dict of inputs gets a stand-in that takes the dict and
returns one tensor, so the baseline runs (Identity would hand the next layer
the dict: KeyError: -1)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tfrepro import features as fb
from tfrepro.annotate import annotate_text

SCRIPT = textwrap.dedent(
    """\
    import numpy as np
    import tensorflow as tf
    from tensorflow import keras


    class FeatureLayer(keras.layers.Layer):
        def call(self, inputs):
            return tf.concat([inputs["a"] / 10.0, tf.math.log1p(inputs["b"])], axis=-1)


    cols = {"a": np.arange(64, dtype="float32")[:, None], "b": np.ones((64, 3), "float32")}
    inputs = {name: keras.Input(shape=v.shape[1:], name=name) for name, v in cols.items()}
    x = FeatureLayer()(inputs)
    out = keras.layers.Dense(1)(x)
    model = keras.Model(inputs, out)
    model.compile("sgd", "mse")
    model.fit(cols, np.zeros((64, 1), "float32"), batch_size=16, epochs=1, verbose=0)
    print("RAN", model.layers[-1].kernel.shape)
    """
)


def _off_variant() -> str:
    text, found, _ = annotate_text(SCRIPT, "train.py")
    assert [f.name for f in found] == ["custom_layer_feature_layer"]
    assert "dict of inputs concatenated" in found[0].description
    return fb.parse(text, "train.py").render([])


def test_a_dict_input_layer_gets_a_stand_in_that_takes_the_dict():
    off = _off_variant()
    live = [ln for ln in off.splitlines() if not ln.lstrip().startswith("#")]
    assert not any("FeatureLayer()(" in ln for ln in live)
    assert any("tf.nest.flatten(inputs)" in ln and "Lambda" in ln for ln in live)


@pytest.mark.e2e
def test_the_stand_in_runs_and_keeps_every_input(tmp_path):
    (tmp_path / "off.py").write_text(_off_variant())
    r = subprocess.run([sys.executable, "off.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RAN (4, 1)" in r.stdout  # a (1 column) + b (3 columns), concatenated
