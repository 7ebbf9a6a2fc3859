"""Fixture: the custom-loop twin of fit_basic (same model, data, optimizer,
loss reduction, batch order, training=True). Prints `step=N loss=X` lines and
writes the same losses to own_losses.txt."""

import numpy as np
import tensorflow as tf

import keras

BATCH, EPOCHS = 8, 2
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.1).astype("float32")

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


step = 0
for epoch in range(EPOCHS):
    for b in range(0, len(x), BATCH):
        loss = float(train_step(x[b : b + BATCH], y[b : b + BATCH]))
        step += 1
        with open("own_losses.txt", "a") as f:
            f.write(repr(loss) + "\n")
        print(f"step={step} loss={loss!r}")
print("done")
