"""Repro with nothing to find: every feature is harmless.

The full configuration (every feature on) trains like the baseline: same
per-step loss, no NaN, no slowdown. `tfrepro bisect` must say so instead of
blaming a feature.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 30
BATCH = 64

# tfrepro: feature memory_growth -- allocate GPU memory on demand (no-op without GPUs)
# for gpu in tf.config.list_physical_devices("GPU"):
#     tf.config.experimental.set_memory_growth(gpu, True)
# tfrepro: end

keras.utils.set_random_seed(0)

rng = np.random.default_rng(7)
x = rng.normal(size=(1024, 10)).astype("float32")
y = (x[:, 0] - x[:, 1] > 0).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
# tfrepro: feature cache -- keep the batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

model = keras.Sequential(
    [
        keras.Input(shape=(10,)),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(2),
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
# tfrepro: feature terminate_on_nan -- stop training at the first NaN loss
# callbacks.append(keras.callbacks.TerminateOnNaN())
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
