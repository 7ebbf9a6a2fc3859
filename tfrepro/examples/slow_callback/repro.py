"""Repro: an image classifier whose training got several times slower.

The baseline (every feature off) runs at full speed. With every feature on,
each step takes much longer; `tfrepro bisect` finds which feature costs it.
"""

import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

STEPS = 40
BATCH = 32

keras.utils.set_random_seed(0)


class MetricsPoster(keras.callbacks.Callback):
    """Sends the loss of every batch to the team's metrics server.

    The POST is synchronous and runs in `on_train_batch_end`, i.e. once per
    step. Here the server's round trip is simulated with a 30 ms sleep, a
    typical figure for a service in another zone.
    """

    def __init__(self):
        super().__init__()
        self.sent = 0

    def on_train_batch_end(self, batch, logs=None):
        payload = {"batch": batch, "loss": float((logs or {}).get("loss", 0.0))}
        time.sleep(0.03)  # stands in for requests.post(URL, json=payload)
        self.sent += 1


rng = np.random.default_rng(2)
x = rng.normal(size=(512, 16, 16, 1)).astype("float32")
y = rng.integers(0, 4, size=(512,)).astype("int32")
x[np.arange(512), 8, 8, 0] += 2.0 * y  # a learnable signal in the centre pixel

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
        keras.Input(shape=(16, 16, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(4),
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
# tfrepro: feature metrics_poster -- push every batch's loss to the metrics server
# callbacks.append(MetricsPoster())
# tfrepro: end
# tfrepro: feature checkpoint -- save the weights at the end of each epoch
# callbacks.append(keras.callbacks.ModelCheckpoint(tempfile.mkdtemp() + "/ckpt.weights.h5", save_weights_only=True))
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
