"""custom_loop: hand-written training loops found by the annotator, with
`fit` built from the loop's own parts as the OFF form (annotate/loops.py).
Pure text in, text out: no TensorFlow."""

from __future__ import annotations

import textwrap

from tfrepro import features as fb
from tfrepro.annotate import annotate_text

HEAD = """\
import tensorflow as tf
import keras

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.1)
loss_fn = keras.losses.MeanSquaredError()
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
"""

STEP_FN = """
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        loss = {loss}
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def annotated(body: str) -> tuple[str, dict, list]:
    text = HEAD + textwrap.dedent(body)
    new, found, skipped = annotate_text(text, "train.py", only=["custom_loop"])
    return new, {f.name: f for f in found}, [s.reason for s in skipped]


def off_part(new: str) -> str:
    """The custom_loop block's OFF code, as a variant with custom_loop off renders it."""
    parsed = fb.parse(new, "train.py")
    return parsed.render(set(), export=True)


def test_a_step_function_loop_becomes_fit_with_the_same_parts():
    new, found, _ = annotated(
        STEP_FN.format(loss="loss_fn(yb, pred)") + "\nfor step, (xb, yb) in enumerate(ds.take(20), start=1):\n"
        "    loss = train_step(xb, yb)\n"
        "    print(f'step {step}: {float(loss):.4f}')\n"
    )
    assert found["custom_loop"].kind == "loop" and not found["custom_loop"].affects_loss
    assert fb.parse(new, "train.py").render({"custom_loop"}) == new  # ON: the file as written
    off = off_part(new)
    assert (
        "model.compile(optimizer=optimizer, loss=loss_fn, run_eagerly=True)\nmodel.fit(ds.take(20), epochs=1, verbose=0)\n"
        in off
    )
    assert "for step" not in off.replace("# for step", "")


def test_a_hand_written_loss_is_wrapped_as_a_keras_loss():
    new, found, _ = annotated(
        STEP_FN.format(loss="tf.reduce_mean(tf.square(yb - pred))") + "\nfor epoch in range(3):\n"
        "    for xb, yb in ds:\n"
        "        loss = train_step(xb, yb)\n"
        "    print(epoch)\n"
    )
    off = off_part(new)
    assert "def fit_loss(y_true, y_pred):\n    return tf.reduce_mean(tf.square(y_true - y_pred))\n" in off
    assert (
        "model.compile(optimizer=optimizer, loss=fit_loss, run_eagerly=True)\nmodel.fit(ds.repeat(3), epochs=1, verbose=0)\n"
        in off
    )
    assert found["custom_loop"].note


def test_an_inline_tape_loop_with_the_model_call_inside_the_loss():
    new, found, _ = annotated(
        """
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb))
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply(grads, model.trainable_weights)
        """
    )
    assert "custom_loop" in found
    assert "model.fit(ds, epochs=1, verbose=0)" in off_part(new)


def test_a_train_on_batch_loop_becomes_fit_over_the_same_data():
    new, found, _ = annotated(
        """
        model.compile(optimizer="adam", loss="mse")
        for epoch in range(2):
            for xb, yb in ds:
                model.train_on_batch(xb, yb)
        """
    )
    assert "custom_loop" in found
    off = off_part(new)
    assert "model.fit(ds.repeat(2), epochs=1, verbose=0)" in off and off.count("compile(") == 1


def test_a_train_step_override_with_the_compiled_loss_is_switched_to_keras_own():
    new, found, _ = annotated(
        """
        class Trainer(keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(y=y, y_pred=self(x, training=True))
                self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
                return {"loss": loss}
        """
    )
    assert "custom_loop" in found
    off = off_part(new)
    assert "def train_step" not in off and "class Trainer(keras.Model):" in off
    compile(off, "train.py", "exec")


def test_loops_whose_parts_cannot_be_identified_are_reported_with_the_reason():
    cases = {
        "strategy.run": (
            "def step_fn(xb, yb):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = loss_fn(yb, model(xb))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n"
            "for xb, yb in ds:\n"
            "    strategy.run(step_fn, args=(xb, yb))\n",
            "not called directly from a loop",
        ),
        "other state": (
            STEP_FN.format(loss="loss_fn(yb, pred) + penalty * scale").replace(
                "def train_step(xb, yb):", "def train_step(xb, yb, scale):"
            )
            + "for xb, yb in ds:\n    train_step(xb, yb, 2.0)\n",
            "besides the prediction",
        ),
        "read after": (
            STEP_FN.format(loss="loss_fn(yb, pred)")
            + "for xb, yb in ds:\n    loss = train_step(xb, yb)\nprint(loss)\n",
            "is read after it",
        ),
        "range": (
            STEP_FN.format(loss="loss_fn(yb, pred)") + "for i in range(10):\n    train_step(x[i], y[i])\n",
            "does not iterate (x, y) batches",
        ),
        "own loss": (
            "class T(keras.Model):\n"
            "    def train_step(self, data):\n"
            "        x, y = data\n"
            "        return {'loss': tf.reduce_mean(tf.square(y - self(x)))}\n",
            "computes its own loss",
        ),
    }
    for label, (body, reason) in cases.items():
        new, found, skipped = annotated(body)
        assert "custom_loop" not in found, label
        assert any("not switchable" in s and reason in s for s in skipped), (label, skipped)
        assert new == HEAD + body


def test_an_apply_that_is_no_training_step_is_not_a_loop():
    _, found, skipped = annotated("for row in rows:\n    frame.apply(row)\n")
    assert not found and not skipped


def test_a_loss_that_reshapes_the_labels_itself_gets_them_unaligned():
    new, _, _ = annotated(
        STEP_FN.format(loss="tf.reduce_mean(tf.square(yb[:, None] - pred))")
        + "for xb, yb in ds:\n    train_step(xb, yb)\n"
    )
    off = off_part(new)
    assert "class FitLoss(keras.losses.Loss):\n    def call(self, y_true, y_pred):\n" in off
    assert "return tf.reduce_mean(tf.square(y_true[:, None] - y_pred))" in off
    assert "model.compile(optimizer=optimizer, loss=FitLoss(), run_eagerly=True)" in off


def test_the_loss_class_is_named_the_way_the_file_names_keras():
    # One list of Keras modules (Src.keras_prefix) for layers and losses alike.
    body = (
        STEP_FN.format(loss="tf.reduce_mean(tf.square(yb[:, None] - pred))")
        + "for xb, yb in ds:\n    train_step(xb, yb)\n"
    )
    for head, prefix in (
        ("import tensorflow as tf\n", "tf.keras"),
        ("from tensorflow.python import keras as K\n", "K"),
    ):
        text = head + HEAD.replace("import tensorflow as tf\nimport keras\n", "") + textwrap.dedent(body)
        new, _, _ = annotate_text(text, "train.py", only=["custom_loop"])
        assert f"class FitLoss({prefix}.losses.Loss):" in off_part(new), head


LOOP = "\nfor xb, yb in ds:\n    loss = train_step(xb, yb)\n"


def test_fit_keeps_the_compile_mode_of_the_loops_step():
    # Toggling custom_loop changes the loop into fit and nothing else: an eager step gives an
    # eager fit; a tf.function step (a feature of its own, so eager when it is off) the mode
    # read from the function when fit is compiled; jit_compile=True the XLA flag read the same way.
    eager = off_part(annotated(STEP_FN.format(loss="loss_fn(yb, pred)") + LOOP)[0])
    assert "model.compile(optimizer=optimizer, loss=loss_fn, run_eagerly=True)\n" in eager
    graph = off_part(annotated("\n@tf.function" + STEP_FN.format(loss="loss_fn(yb, pred)") + LOOP)[0])
    mode = 'run_eagerly=not hasattr(train_step, "get_concrete_function")'
    assert f"model.compile(optimizer=optimizer, loss=loss_fn, {mode}, jit_compile=False)\n" in graph
    xla = "\n@tf.function(jit_compile=True)" + STEP_FN.format(loss="loss_fn(yb, pred)") + LOOP
    jit = 'jit_compile=getattr(train_step, "_jit_compile", None) is True'
    assert f"loss=loss_fn, {mode}, {jit})\n" in off_part(annotated(xla)[0])
    wrapped = STEP_FN.format(loss="loss_fn(yb, pred)") + "\ntrain_step = tf.function(train_step)\n" + LOOP
    assert f"loss=loss_fn, {mode}, jit_compile=False)\n" in off_part(annotated(wrapped)[0])


def test_an_inline_loop_is_fit_run_eagerly():
    new, _, _ = annotated(
        "\nfor xb, yb in ds:\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(yb, model(xb, training=True))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    assert "model.compile(optimizer=optimizer, loss=loss_fn, run_eagerly=True)\n" in off_part(new)


def test_an_elementwise_op_of_labels_and_predictions_is_wrapped_not_compiled_as_a_loss():
    # The rule check 7 reads too (annotate/loops.py `loss_call`): `tf.square(yb, pred)` once went
    # to compile as a loss here while check 7 called it hand-written; `loss_fn(yb, pred)` is the
    # one form fit is given as it is (by position, the labels as they come).
    loop = "\nfor xb, yb in ds:\n    train_step(xb, yb)\n"
    for loss, fn in (("tf.square(yb, pred)", "tf.square"), ("tf.math.squared_difference(yb, pred)", "tf.math")):
        off = off_part(annotated(STEP_FN.format(loss=loss) + loop)[0])
        assert f"def fit_loss(y_true, y_pred):\n    return {fn}" in off and "loss=fit_loss," in off, loss
    off = off_part(annotated(STEP_FN.format(loss="loss_fn(yb, y_pred=pred)") + loop)[0])
    assert "return loss_fn(y_true, y_pred=y_pred)\n" in off
