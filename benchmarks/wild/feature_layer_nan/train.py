"""Structured data: a model over named feature columns, with its own feature layer.

Modelled on the shape of TensorFlow's structured-data tutorials (a dict of
`keras.Input`s, one per column, turned into one tensor by a feature layer,
then Dense layers; tensorflow/docs site/en/tutorials/structured_data),
rewritten to run offline on synthetic columns of the same kinds. Planted
problem: the feature layer takes the log of the raw money column, which has
zeros: -inf, then NaN in the loss.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

rng = np.random.default_rng(1)
N = 2048
columns = {
    "age": rng.integers(18, 90, N).astype("float32"),
    "balance": np.where(rng.random(N) < 0.2, 0.0, rng.gamma(2.0, 800.0, N)).astype("float32"),
    "tenure": rng.integers(0, 11, N).astype("float32"),
    "products": rng.integers(1, 5, N).astype("float32"),
}
labels = ((columns["age"] > 50) ^ (columns["balance"] > 1500)).astype("float32")


class FeatureLayer(keras.layers.Layer):
    """Scale the numeric columns and stack them into one feature vector."""

    def call(self, inputs):
        age = inputs["age"] / 100.0
        balance = tf.math.log(inputs["balance"]) / 10.0
        tenure = inputs["tenure"] / 10.0
        products = inputs["products"] / 4.0
        return tf.concat([age, balance, tenure, products], axis=-1)


feature_inputs = {name: keras.Input(shape=(1,), name=name) for name in columns}
features = FeatureLayer()(feature_inputs)
x = keras.layers.Dense(32, activation="relu")(features)
x = keras.layers.Dropout(0.1)(x)
out = keras.layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(feature_inputs, out)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])

ds = tf.data.Dataset.from_tensor_slices(({k: v[:, None] for k, v in columns.items()}, labels))
ds = ds.shuffle(N, seed=0).batch(32).prefetch(tf.data.AUTOTUNE)
model.fit(ds, epochs=2, verbose=2)
