"""Customer churn on tabular data, with a custom preprocessing layer.

Modelled on a common pattern of Keras churn examples (numeric columns, a
custom layer that takes log1p of the money columns, a small MLP with
EarlyStopping), rewritten to run offline on synthetic columns. Healthy: no
planted problem.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

rng = np.random.default_rng(7)
N = 4096
x = np.stack(
    [
        rng.integers(18, 90, N),  # age
        rng.gamma(2.0, 900.0, N),  # balance (money)
        rng.gamma(3.0, 20000.0, N),  # estimated salary (money)
        rng.integers(0, 11, N),  # tenure
    ],
    axis=1,
).astype("float32")
y = ((x[:, 0] > 45) & (x[:, 1] > 1200)).astype("float32")


class LogMoney(keras.layers.Layer):
    """log1p of the two money columns, the others scaled."""

    def call(self, inputs):
        age = inputs[:, 0:1] / 100.0
        money = tf.math.log1p(inputs[:, 1:3]) / 12.0
        tenure = inputs[:, 3:4] / 10.0
        return tf.concat([age, money, tenure], axis=-1)


model = keras.Sequential(
    [
        keras.Input(shape=(4,)),
        LogMoney(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=3, restore_best_weights=True)
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(tf.data.AUTOTUNE)
model.fit(ds, epochs=3, callbacks=[stop], verbose=2)
