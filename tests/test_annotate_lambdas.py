"""A Lambda layer over the project's own code is a custom layer
(annotate/custom.py): keras-team/keras#9097's distance of two embeddings.
Pure text in, text out: no TensorFlow."""

from __future__ import annotations

from tfrepro import features as fb
from tfrepro.annotate import annotate_text

HEAD = """\
import tensorflow as tf
import keras
from keras import ops


def euclidean_distance(vects):
    x, y = vects
    return ops.sqrt(ops.sum(ops.square(x - y), axis=1, keepdims=True))


a = keras.Input((4,))
b = keras.Input((4,))
"""


def annotated(body: str) -> tuple[str, dict, list]:
    new, found, skipped = annotate_text(HEAD + body, "train.py")
    return new, {f.name: f for f in found}, [s.reason for s in skipped]


def test_a_lambda_over_two_tensors_is_a_custom_layer_joined_when_off():
    body = "distance = keras.layers.Lambda(euclidean_distance)([a, b])\nout = keras.layers.Dense(1)(distance)\n"
    new, found, _ = annotated(body)
    f = found["custom_layer_euclidean_distance"]
    assert f.kind == "custom_layer" and f.affects_loss and f.line == HEAD.count("\n") + 1
    assert "Lambda(euclidean_distance)" in f.description and "list of inputs averaged" in f.description
    off = fb.parse(new, "train.py").render(set(), export=True)
    assert "distance = keras.layers.Lambda(lambda inputs: (lambda ts: tf.add_n(ts)" in off and "([a, b])" in off
    assert "Lambda(euclidean_distance)" not in off
    assert fb.parse(new, "train.py").render({"custom_layer_euclidean_distance"}, export=True) == HEAD + body


def test_a_lambda_on_one_tensor_is_identity_when_off_with_a_note():
    new, found, _ = annotated('from keras.layers import Lambda\nh = Lambda(lambda t: t * 2.0, name="double")(a)\n')
    f = found["custom_layer_double"]
    assert f.note and "Identity()" in f.note
    assert "h = keras.layers.Identity()(a)" in fb.parse(new, "train.py").render(set(), export=True)
    _, found, _ = annotated("scaled = keras.layers.Lambda(lambda t: t / 255.0)(a)\n")
    assert "custom_layer_scaled" in found


def test_a_lambda_over_a_library_function_is_not_the_projects_code():
    _, found, skipped = annotated("h = keras.layers.Lambda(tf.nn.relu)(a)\nk = keras.layers.Lambda(ops.abs)(a)\n")
    assert not [n for n in found if n.startswith("custom_layer")] and not skipped


def test_a_lambda_and_a_layer_class_called_on_one_list_get_one_stand_in():
    # One rule (annotate/custom.py): a list of inputs is averaged when they share a shape
    # (the width a merge layer keeps), a dict concatenated; a Lambda once got a concatenation.
    cls = "class Dist(keras.layers.Layer):\n    def call(self, v):\n        return euclidean_distance(v)\n\n\n"
    for call in ("[a, b]", '{"a": a, "b": b}'):
        body = f"d1 = keras.layers.Lambda(euclidean_distance)({call})\nd2 = Dist()({call})\n"
        new, found, _ = annotated(cls + body)
        lam, layer = found["custom_layer_euclidean_distance"], found["custom_layer_dist"]
        assert lam.description.split("; off: ")[1] == layer.description.split("; off: ")[1]
        off = fb.parse(new, "train.py").render(set(), export=True).splitlines()
        assert off[-2].removeprefix("d1 = ") == off[-1].removeprefix("d2 = ")


def test_a_list_input_in_a_file_without_tensorflow_is_left_alone_by_either_kind():
    # The same rule (standins.structured_standin): with no `import tensorflow` to write the stand-in
    # with, neither is marked; a layer class once got Identity(), which hands the next layer the list.
    code = (
        "import keras\n\n\ndef dist(v):\n    return v[0] - v[1]\n\n\n"
        "class Dist(keras.layers.Layer):\n    def call(self, v):\n        return dist(v)\n\n\n"
        "d1 = keras.layers.Lambda(dist)([a, b])\nd2 = Dist()([a, b])\n"
    )
    new, found, skipped = annotate_text(code, "train.py")
    assert new == code and not found
    why = "takes a list of inputs and the file imports no TensorFlow to join them with: not marked"
    assert [s.reason for s in skipped] == [f"Lambda(dist) {why}", f"Dist {why}"]
