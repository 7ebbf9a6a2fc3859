"""Planted project for `tfrepro check`: a custom loop fed by a pipeline whose
per-sample `map` runs slow Python (a decoder in `tf.py_function`), one sample
at a time, without parallel calls or prefetch: the model waits for data.
"""

import time

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 32)).astype("float32")
w = rng.normal(size=(32, 10)).astype("float32")
y = (x @ w).argmax(axis=1).astype("int32")


def decode(sample):
    time.sleep(0.0003)  # stands in for a slow Python decoder
    return sample


def load(sample, label):
    sample = tf.py_function(decode, [sample], tf.float32)
    sample.set_shape([32])
    return sample, label


ds = tf.data.Dataset.from_tensor_slices((x, y)).map(load).batch(64).repeat()

model = keras.Sequential([
    keras.Input(shape=(32,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(10),
])
optimizer = keras.optimizers.Adam(3e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step, (xb, yb) in enumerate(ds.take(40), start=1):
    loss = train_step(xb, yb)
    print(f"step={step} loss={float(loss):.6f}")
