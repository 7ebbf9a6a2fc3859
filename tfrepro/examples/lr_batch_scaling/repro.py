"""Repro: the loss curve no longer matches the single-device reference run.

Production trains on 8 replicas, so the config multiplies the learning rate
by 8 (the linear scaling rule for a global batch 8x larger). This repro runs
on one device with the same per-replica batch, the setting the reference curve
was recorded with. The learning-rate warmup is an intended change of the math
(`affects_loss = true` in tfrepro.toml) and must never be blamed.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 40
BATCH = 32  # per replica; not multiplied, since this run has one replica
BASE_LR = 2e-3

keras.utils.set_random_seed(0)

rng = np.random.default_rng(5)
x = rng.normal(size=(512, 12)).astype("float32")
w = rng.normal(size=(12, 1)).astype("float32")
y = (np.tanh(x @ w) + 0.05 * rng.normal(size=(512, 1))).astype("float32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
# tfrepro: feature cache -- keep the batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

lr = BASE_LR
# tfrepro: feature large_batch_lr -- linear LR scaling for 8 replicas (global batch = 8 x 32)
# lr = lr * 8
# tfrepro: end
# tfrepro: feature lr_warmup -- linear warmup over the first 10 steps
# lr = keras.optimizers.schedules.PolynomialDecay(
#     lr / 10, decay_steps=10, end_learning_rate=lr, power=1.0
# )
# tfrepro: end

model = keras.Sequential(
    [
        keras.Input(shape=(12,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(lr), loss="mse")

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
