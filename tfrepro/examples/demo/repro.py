"""Demo repro: a small classifier on raw sensor readings (values in the hundreds).

The baseline (every feature off) trains cleanly. Turning on the engineering
features one day made the loss NaN from the first step. `tfrepro demo` runs
`tfrepro bisect` on this project to find out which feature did it.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 30
BATCH = 32

# tfrepro: feature mixed_precision -- float16 compute, float32 weights (mixed_float16 policy)
# keras.mixed_precision.set_global_policy("mixed_float16")
# tfrepro: end

keras.utils.set_random_seed(0)


class Standardize(keras.layers.Layer):
    """Per-sample standardisation, written by hand: var = E[x^2] - E[x]^2."""

    def call(self, x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) - tf.square(mean)
        return (x - mean) / tf.sqrt(var + 1e-3)


# Synthetic data with the real shapes and units: 16 sensors reading 300..700.
rng = np.random.default_rng(0)
x = rng.uniform(300.0, 700.0, size=(512, 16)).astype("float32")
w = rng.normal(size=(16,)).astype("float32")
y = ((x - 500.0) @ w > 0).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
# tfrepro: feature cache -- keep the decoded batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

model = keras.Sequential(
    [
        keras.Input(shape=(16,)),
        Standardize(),
        keras.layers.Dense(32, activation="relu"),
        # float32 logits: the usual advice for mixed precision outputs
        keras.layers.Dense(2, dtype="float32"),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-2),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
