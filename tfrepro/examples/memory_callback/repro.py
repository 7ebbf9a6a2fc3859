"""Repro: a classifier whose training process keeps growing in memory.

The baseline (every feature off) trains with flat memory after the first
steps. With every feature on, the resident memory climbs by megabytes every
step until the job is killed on a long run; `tfrepro bisect` finds which
feature holds on to it.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 40
BATCH = 32

keras.utils.set_random_seed(0)


class WeightHistory(keras.callbacks.Callback):
    """Keeps a copy of the weights after every batch, to plot how each
    layer's weights move during training.

    The copies are numpy arrays that live as long as the callback: one full
    copy of the model (~3 MB here, gigabytes for a real model) per step.
    """

    def __init__(self):
        super().__init__()
        self.history = []

    def on_train_batch_end(self, batch, logs=None):
        self.history.append([w.numpy() for w in self.model.weights])


rng = np.random.default_rng(3)
x = rng.normal(size=(1024, 784)).astype("float32")
y = rng.integers(0, 10, size=(1024,)).astype("int32")
x[np.arange(1024), y] += 3.0  # a learnable signal

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        keras.layers.Dense(768, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end
# tfrepro: feature weight_history -- keep the weights of every step for trajectory plots
# callbacks.append(WeightHistory())
# tfrepro: end
# tfrepro: feature terminate_on_nan -- stop training on a NaN loss
# callbacks.append(keras.callbacks.TerminateOnNaN())
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
