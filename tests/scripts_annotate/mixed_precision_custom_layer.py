"""Mixed-precision regression with the team's own layers.

`RMSNorm` normalises activations (computed in float32 for stability);
`ScaledDense` is a Dense layer whose output is multiplied by a fixed scale.
"""

import os

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

STEPS = int(os.environ.get("TRAIN_STEPS", "12"))
BATCH = 32

keras.mixed_precision.set_global_policy("mixed_float16")


class RMSNorm(layers.Layer):
    """Root-mean-square normalisation with a learned scale."""

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.scale = self.add_weight(shape=input_shape[-1:], initializer="ones", name="scale")

    def call(self, x):
        x32 = ops.cast(x, "float32")
        ms = ops.mean(ops.square(x32), axis=-1, keepdims=True)
        y = x32 * ops.rsqrt(ms + self.epsilon) * self.scale
        return ops.cast(y, self.compute_dtype)


class ScaledDense(layers.Dense):
    """A Dense layer with its output scaled down, as in the paper."""

    def call(self, inputs):
        return super().call(inputs) * 0.5


def make_dataset(x, y):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return ds.batch(BATCH).repeat().prefetch(tf.data.AUTOTUNE)


def build_model(dim):
    inputs = keras.Input(shape=(dim,))
    x = ScaledDense(64, activation="relu")(inputs)
    x = RMSNorm(name="norm")(x)
    x = layers.Dense(32, activation="relu")(x)
    outputs = layers.Dense(1, dtype="float32")(x)  # keep the head in float32
    return keras.Model(inputs, outputs)


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 20)).astype("float32")
    y = (x[:, :1] * 2.0 + 0.1).astype("float32")
    model = build_model(20)
    model.compile(
        optimizer=keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3)),
        loss="mse",
    )
    model.fit(make_dataset(x, y), steps_per_epoch=STEPS, epochs=1, verbose=2)
