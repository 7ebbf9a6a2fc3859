"""Planted project for `tfrepro check`: a clean classifier (every check passes).

Standardised inputs, labels in [0, 10), softmax cross-entropy on logits, an
in-memory tf.data pipeline that keeps well ahead of the model.
"""

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 32)).astype("float32")
w = rng.normal(size=(32, 10)).astype("float32")
y = (x @ w).argmax(axis=1).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(64).repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

model = keras.Sequential([
    keras.Input(shape=(32,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(10),
])
model.compile(optimizer=keras.optimizers.Adam(3e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, steps_per_epoch=40, verbose=0)
