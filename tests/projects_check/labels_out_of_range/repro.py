"""Planted project for `tfrepro check`: a custom training loop whose labels
are 1-based (1..10) for a 10-way classifier. `tf.one_hot(10, 10)` is a row of
zeros, so nothing crashes: a tenth of the samples silently teach nothing.
"""

import keras
import numpy as np
import tensorflow as tf

NUM_CLASSES = 10

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 32)).astype("float32")
w = rng.normal(size=(32, NUM_CLASSES)).astype("float32")
y = (x @ w).argmax(axis=1).astype("int32") + 1  # class ids exported 1-based

ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(64).repeat()

model = keras.Sequential([
    keras.Input(shape=(32,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(NUM_CLASSES),
])
optimizer = keras.optimizers.Adam(3e-3)
loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(tf.one_hot(yb, NUM_CLASSES), model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step, (xb, yb) in enumerate(ds.take(40), start=1):
    loss = train_step(xb, yb)
    print(f"step={step} loss={float(loss):.6f}")
