"""Fixture: Keras 2 through tf_keras (run with TF_USE_LEGACY_KERAS=1).

SCENARIO=nan_weights (default): the nan_weights construction (kernel NaN,
loss finite at ln 2); SCENARIO=nan_loss: a NaN in sample 40, loss NaN at
step 6. Writes its own per-step losses to own_losses.txt like fit_basic."""

import os

import numpy as np
import tensorflow as tf

keras = tf.keras
SCENARIO = os.environ.get("SCENARIO", "nan_weights")
BATCH, EPOCHS = 8, 2
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = np.tile(np.array([[1.0], [0.0]], dtype="float32"), (32, 1))
if SCENARIO == "nan_loss":
    y[40] = np.nan  # the loss of step 6 (batch 5) is NaN
else:
    x[0] = 0.0  # zero hidden vector at step 1: NaN gradient of tf.norm


class NormFeature(keras.layers.Layer):
    def call(self, h):
        n = tf.norm(h, axis=-1, keepdims=True)
        h = tf.where(h > 0, h, tf.zeros_like(h))
        if SCENARIO == "nan_loss":
            return h
        return tf.concat([h, tf.where(n >= 0, n, tf.zeros_like(n))], axis=-1)


tf.keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input((4,)),
    keras.layers.Dense(8, use_bias=False, name="hidden"),
    NormFeature(),
    keras.layers.Dense(1, activation="sigmoid", name="out"),
])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy")
loss_fn = keras.losses.BinaryCrossentropy()


class OwnLosses(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        sl = slice(batch * BATCH, (batch + 1) * BATCH)
        loss = float(loss_fn(y[sl], self.model(x[sl], training=True)))
        with open("own_losses.txt", "a") as f:
            f.write(repr(loss) + "\n")


model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[OwnLosses()])
print("keras is", keras.__name__ if hasattr(keras, "__name__") else keras)
