"""Bisect benchmark project: six features, one of which (run_eagerly) makes
every step several times slower (>= 3x on a CPU: every op dispatched from
Python). Sleep-free: the slowdown is real work, not a time.sleep.

Tiny MLP 784->256->256->10, batch 64. `python repro.py` trains for
REPRO_STEPS steps (default 50).
"""

import os
import tempfile  # noqa: F401  (used by the csv_logger feature)

import keras
import numpy as np
import tensorflow as tf

STEPS = int(os.environ.get("REPRO_STEPS", "50"))
STEPS_PER_EPOCH = 10
BATCH = 64

# tfrepro: feature run_eagerly -- run tf.functions eagerly (left on after a debugging session)
# tf.config.run_functions_eagerly(True)
# tfrepro: end

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 784)).astype("float32")
y = rng.integers(0, 10, size=(2048,)).astype("int32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True)
# tfrepro: feature cache -- keep the batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input((784,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 1000)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=1000))
# tfrepro: end
# tfrepro: feature terminate_on_nan -- stop at the first NaN loss
# callbacks.append(keras.callbacks.TerminateOnNaN())
# tfrepro: end

model.fit(ds, epochs=-(-STEPS // STEPS_PER_EPOCH), steps_per_epoch=STEPS_PER_EPOCH, callbacks=callbacks, verbose=0)
