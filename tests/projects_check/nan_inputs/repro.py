"""Planted project for `tfrepro check`: missing readings stored as NaN.

Every 50th sample has a NaN in feature 5, so each batch of 64 holds at
least one: the loss is NaN from the first step. Only the first-batches check
should name the cause.

The model is linear up to the loss on purpose: no ReLU between the NaN and
the loss, so no CPU's kernel can hide it (oneDNN's fused MatMul+BiasAdd+Relu
returns 0 for a NaN on AVX-512 CPUs and NaN on AVX2-only ones); every CPU
sees the loss go NaN at step 1. A NaN that hides in the weights is
tests/test_harness_e2e.py's (planted in the weights, not the kernel).
"""

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 32)).astype("float32")
w = rng.normal(size=(32, 10)).astype("float32")
y = (x @ w).argmax(axis=1).astype("int32")
x[::50, 5] = np.nan  # a sensor that sometimes reports nothing

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()

model = keras.Sequential([
    keras.Input(shape=(32,)),
    keras.layers.Dense(256),
    keras.layers.Dense(10),
])
model.compile(optimizer=keras.optimizers.Adam(3e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, steps_per_epoch=40, verbose=0)
