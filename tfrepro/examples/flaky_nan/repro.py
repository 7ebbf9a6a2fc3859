"""Repro: the loss goes NaN in some runs and not in others.

The data comes in 8 shards of 160 records; a trial of 20 steps reads the
first 4 shards. Shard 6 holds one corrupt record (a NaN from a sensor
dropout). `shard_shuffle` reads the shards in a fresh random order every run,
drawn from the operating system's entropy (like an unseeded file listing), so
the seeds the harness sets do not pin it: about half the runs reach shard 6
within the trial and go NaN. `tfrepro bisect` must call this flaky rather
than name a culprit from one unlucky run.
"""

import random
import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 20
BATCH = 32
NUM_SHARDS = 8
SHARD_SIZE = 160

keras.utils.set_random_seed(0)

rng = np.random.default_rng(8)
shards = []
for i in range(NUM_SHARDS):
    xs = rng.normal(size=(SHARD_SIZE, 8)).astype("float32")
    ys = (xs[:, 0] + 0.5 * xs[:, 1] > 0).astype("float32")
    shards.append((xs, ys))
shards[6][0][37, 2] = np.nan  # the corrupt record

order = list(range(NUM_SHARDS))
# tfrepro: feature shard_shuffle -- read the shards in a new random order each run (unseeded)
# random.SystemRandom().shuffle(order)
# tfrepro: end
x = np.concatenate([shards[i][0] for i in order])
y = np.concatenate([shards[i][1] for i in order])

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
        keras.Input(shape=(8,)),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(1),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-2),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
)

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
