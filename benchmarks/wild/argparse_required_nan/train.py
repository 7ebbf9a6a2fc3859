"""A training script with a `main()` and required command-line flags.

The shape of many training scripts attached to TensorFlow bug reports
(argparse with required flags, a model builder, `main()` under the
`__main__` guard), written for this suite; offline, synthetic data.
Planted problem: a custom "safe log" layer that is not safe (log of inputs
that can be zero): NaN.
"""

import argparse

import numpy as np
import tensorflow as tf
from tensorflow import keras


class SafeLog(keras.layers.Layer):
    def call(self, inputs):
        return tf.math.log(inputs)


def build_model(width):
    return keras.Sequential(
        [
            keras.Input(shape=(16,)),
            SafeLog(),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--width", type=int, default=32)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, size=(1024, 16)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    model = build_model(args.width)
    model.compile(optimizer="adam", loss="mse")
    model.fit(ds, epochs=args.epochs, verbose=2)


if __name__ == "__main__":
    main()
