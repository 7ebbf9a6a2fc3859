"""Repro: regression on raw meter readings with a hand-written normalisation layer.

`CustomNorm` re-implements LayerNormalization by hand (the export runtime has
no LayerNorm op). It matches the stock layer in float32. The baseline (every
feature off) trains cleanly; with every feature on the loss is NaN.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf
from keras import ops

STEPS = 30
BATCH = 32

# tfrepro: feature mixed_precision -- float16 compute, float32 weights (mixed_float16 policy)
# keras.mixed_precision.set_global_policy("mixed_float16")
# tfrepro: end

keras.utils.set_random_seed(0)


class CustomNorm(keras.layers.Layer):
    """Layer normalisation by hand, with the one-pass variance E[x^2] - E[x]^2."""

    def build(self, input_shape):
        self.gamma = self.add_weight(shape=input_shape[-1:], initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=input_shape[-1:], initializer="zeros", name="beta")

    def call(self, x):
        mean = ops.mean(x, axis=-1, keepdims=True)
        var = ops.mean(ops.square(x), axis=-1, keepdims=True) - ops.square(mean)
        return (x - mean) * ops.rsqrt(var + 1e-3) * self.gamma + self.beta


# Synthetic meter readings in raw units (200..900), the shape of the real data.
rng = np.random.default_rng(1)
x = rng.uniform(200.0, 900.0, size=(512, 24)).astype("float32")
w = rng.normal(size=(24, 1)).astype("float32")
y = (((x - 550.0) / 200.0) @ w + 0.1 * rng.normal(size=(512, 1))).astype("float32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
# tfrepro: feature cache -- keep the batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

# tfrepro: feature custom_norm -- hand-written layer normalisation instead of keras.layers.LayerNormalization
# norm = CustomNorm()
# tfrepro: else
norm = keras.layers.LayerNormalization(epsilon=1e-3)
# tfrepro: end

model = keras.Sequential(
    [
        keras.Input(shape=(24,)),
        norm,
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end
# tfrepro: feature terminate_on_nan -- stop training at the first NaN loss
# callbacks.append(keras.callbacks.TerminateOnNaN())
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
