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


# A layer over a list of same-shaped inputs (keras-io's VAE Sampling) feeds a
# decoder model built for its width: a concatenation (width 4) would crash it.
LIST_SCRIPT = textwrap.dedent(
    """\
    import numpy as np
    import tensorflow as tf
    from tensorflow import keras
    from tensorflow.keras import layers


    class Sampling(layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            return z_mean + tf.sqrt(z_log_var) * tf.random.normal(tf.shape(z_mean))


    enc_in = keras.Input(shape=(8,))
    z_mean = layers.Dense(2)(enc_in)
    z_log_var = layers.Dense(2)(enc_in)
    z = Sampling()([z_mean, z_log_var])
    encoder = keras.Model(enc_in, [z_mean, z_log_var, z])
    dec_in = keras.Input(shape=(2,))
    decoder = keras.Model(dec_in, layers.Dense(8)(dec_in))
    x = np.random.default_rng(0).standard_normal((64, 8)).astype("float32")
    out = decoder(encoder(x)[2])
    print("RAN", tuple(out.shape), bool(np.isfinite(out.numpy()).all()))
    """
)


def _list_off_variant() -> str:
    text, found, _ = annotate_text(LIST_SCRIPT, "train.py")
    assert [f.name for f in found] == ["custom_layer_sampling"]
    assert "list of inputs averaged" in found[0].description
    return fb.parse(text, "train.py").render([])


def test_a_list_input_layer_gets_a_stand_in_that_keeps_a_shared_shape():
    live = [ln for ln in _list_off_variant().splitlines() if not ln.lstrip().startswith("#")]
    assert not any("Sampling()(" in ln for ln in live)
    assert any("add_n(ts) / len(ts)" in ln and "Lambda" in ln for ln in live)


@pytest.mark.e2e
def test_the_list_stand_in_runs_into_a_model_built_for_the_layers_width(tmp_path):
    (tmp_path / "off.py").write_text(_list_off_variant())
    r = subprocess.run([sys.executable, "off.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RAN (64, 8) True" in r.stdout  # width 2 kept, no NaN from sqrt of a negative


# Issue 25: a distance layer called on two positional tensors (the keras#9097
# siamese shape, written as a subclassed layer): `Dist()(a, b)`. The whole
# call is stood in by the list stand-in over [a, b], so the baseline still
# runs the two towers and the head.
TWO_INPUT_SCRIPT = textwrap.dedent(
    """\
    import numpy as np
    import tensorflow as tf
    from tensorflow import keras
    from tensorflow.keras import layers


    class Dist(layers.Layer):
        def call(self, a, b):
            return tf.sqrt(tf.reduce_sum(tf.square(a - b), axis=1, keepdims=True))


    tower = keras.Sequential([layers.Dense(4)])
    in_a, in_b = keras.Input(shape=(6,)), keras.Input(shape=(6,))
    d = Dist()(tower(in_a), tower(in_b))
    out = layers.Dense(1, activation="sigmoid")(d)
    model = keras.Model([in_a, in_b], out)
    model.compile("sgd", "binary_crossentropy")
    x = np.random.default_rng(0).standard_normal((32, 6)).astype("float32")
    h = model.fit([x, x], np.ones((32, 1), "float32"), batch_size=8, epochs=1, verbose=0)
    print("RAN", model.layers[-1].kernel.shape, bool(np.isfinite(h.history["loss"][-1])))
    """
)


def _two_input_off_variant() -> str:
    text, found, _ = annotate_text(TWO_INPUT_SCRIPT, "train.py")
    assert [f.name for f in found] == ["custom_layer_dist"]
    assert "2 inputs averaged" in found[0].description
    return fb.parse(text, "train.py").render([])


def test_a_layer_called_on_two_tensors_is_marked_with_both_inputs_kept():
    live = [ln for ln in _two_input_off_variant().splitlines() if not ln.lstrip().startswith("#")]
    assert not any("Dist()(" in ln for ln in live)
    assert any("add_n(ts) / len(ts)" in ln and "([tower(in_a), tower(in_b)])" in ln for ln in live)


@pytest.mark.e2e
def test_the_two_input_stand_in_runs(tmp_path):
    (tmp_path / "off.py").write_text(_two_input_off_variant())
    r = subprocess.run([sys.executable, "off.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RAN (4, 1) True" in r.stdout  # the head sees the towers' width (4), averaged
