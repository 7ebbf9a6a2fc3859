"""Timing benchmark project: the motivating case of issue 15.

A CPU MLP 784->256->256->10, batch 64. Under the mixed_float16 policy each
step is ~1.4x slower on a CPU (no float16 kernels: casts around every
matmul). `python repro.py` trains for REPRO_STEPS steps (default 50); a
timing trial sets REPRO_STEPS itself so the script runs long enough for
its time budget.
"""

import os

import keras
import numpy as np
import tensorflow as tf

STEPS = int(os.environ.get("REPRO_STEPS", "50"))
BATCH = 64

# tfrepro: feature mixed_precision -- mixed_float16 compute policy
# keras.mixed_precision.set_global_policy("mixed_float16")
# tfrepro: end

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 784)).astype("float32")
y = rng.integers(0, 10, size=(2048,)).astype("int32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()

keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input((784,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10, dtype="float32"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, steps_per_epoch=STEPS, verbose=0)
