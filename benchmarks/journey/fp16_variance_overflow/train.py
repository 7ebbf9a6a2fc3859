# Sensor regression model trained with mixed precision; readings are in raw
# units (hundreds), standardised inside the model by a custom layer.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/56142
# ("Mix precision leads to nan loss": the model trains in float32, but with
# tf.keras.mixed_precision.set_global_policy('mixed_float16') the loss is NaN).
# Here the custom layer computes the variance as E[x^2] - E[x]^2 in the compute
# dtype: x^2 of a reading of ~300 is ~9e4, past float16's max of 65504.
import keras
import numpy as np
import tensorflow as tf
from keras import mixed_precision

mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(3)

rng = np.random.default_rng(3)
readings = (300.0 + 40.0 * rng.normal(size=(4096, 16))).astype("float32")
target = (readings[:, :4].mean(axis=1, keepdims=True) - 300.0) / 40.0


class SensorNorm(keras.layers.Layer):
    """Standardise each reading vector: (x - mean) / sqrt(var + eps)."""

    def call(self, x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        mean_sq = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
        var = mean_sq - tf.square(mean)
        return (x - mean) / tf.sqrt(var + 1e-3)


ds = tf.data.Dataset.from_tensor_slices((readings, target))
ds = ds.shuffle(4096, seed=3).batch(64).repeat().prefetch(tf.data.AUTOTUNE)

inputs = keras.Input(shape=(16,))
h = SensorNorm()(inputs)
h = keras.layers.Dense(64, activation="relu")(h)
h = keras.layers.Dense(64, activation="relu")(h)
outputs = keras.layers.Dense(1, dtype="float32")(h)
model = keras.Model(inputs, outputs)

schedule = keras.optimizers.schedules.CosineDecay(initial_learning_rate=3e-3, decay_steps=200)
model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
model.fit(ds, epochs=4, steps_per_epoch=15, verbose=2,
          callbacks=[keras.callbacks.TerminateOnNaN(), keras.callbacks.EarlyStopping(monitor="loss", patience=2)])
