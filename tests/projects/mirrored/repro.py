"""Fixture: fit_basic under MirroredStrategy over 2 logical CPU devices.

Each replica traces its own train step (in its own thread) and sees half of
the batch; the per-step loss is the global batch's. Own per-step losses are
computed in numpy on the whole batch (tf_keras refuses a Loss object with
batch-mean reduction next to a strategy)."""

import os

import numpy as np
import tensorflow as tf

keras = tf.keras if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else __import__("keras")
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

BATCH, EPOCHS = 8, 2
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.1).astype("float32")

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")


class OwnLosses(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        sl = slice(batch * BATCH, (batch + 1) * BATCH)
        pred = self.model(x[sl], training=True).numpy()
        loss = float(np.mean(np.square(pred - y[sl]), dtype=np.float32))
        with open("own_losses.txt", "a") as f:
            f.write(repr(loss) + "\n")


model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[OwnLosses()])
print("replicas", strategy.num_replicas_in_sync)
