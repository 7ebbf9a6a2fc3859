# Vibration-signal classifier: each window of 64 samples is standardised
# inside the model (per-sample z-score). Some windows come from a sensor that
# was switched off and are flat (all zeros), so their standard deviation is 0.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/21929 (NaNs
# during training with layer normalisation when "the input has zero variance.
# In that case there will be direct division by epsilon"; the fix there was a
# larger epsilon). This hand-written layer has no epsilon at all: 0 / 0 = NaN.
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(17)

rng = np.random.default_rng(17)
n = 2048
freq = rng.integers(1, 4, size=n)
t = np.linspace(0, 2 * np.pi, 64, dtype="float32")
signals = (np.sin(freq[:, None] * t[None, :]) * rng.uniform(0.5, 2.0, size=(n, 1))
           + 0.1 * rng.normal(size=(n, 64))).astype("float32")
signals[rng.random(n) < 0.03] = 0.0  # sensor off
labels = (freq - 1).astype("int32")


class StandardizeWindow(keras.layers.Layer):
    def call(self, x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        std = tf.math.reduce_std(x, axis=-1, keepdims=True)
        return (x - mean) / std


ds = tf.data.Dataset.from_tensor_slices((signals, labels))
ds = ds.shuffle(n, seed=17).batch(64).repeat().prefetch(tf.data.AUTOTUNE)

inputs = keras.Input(shape=(64,))
h = StandardizeWindow()(inputs)
h = keras.layers.Reshape((64, 1))(h)
h = keras.layers.Conv1D(8, 5, activation="relu")(h)
h = keras.layers.GlobalAveragePooling1D()(h)
outputs = keras.layers.Dense(3)(h)
model = keras.Model(inputs, outputs)

warmup_cosine = keras.optimizers.schedules.CosineDecay(
    initial_learning_rate=0.0, decay_steps=200, warmup_target=5e-3, warmup_steps=20)
model.compile(optimizer=keras.optimizers.Adam(warmup_cosine),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(ds, epochs=5, steps_per_epoch=10, verbose=2,
          callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=2),
                     keras.callbacks.CSVLogger("history.csv")])
