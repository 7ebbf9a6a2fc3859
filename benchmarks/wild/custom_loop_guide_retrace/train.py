"""A training loop written from scratch, with one realistic mistake: a Python int into the `tf.function` step.

Modelled on keras-io's guides/writing_a_training_loop_from_scratch.py (a
Dense model, an optimizer, a loss, a tf.data pipeline, a `tf.function`
train step, a loop over epochs and batches, metrics reset per epoch),
rewritten to run offline on synthetic MNIST-shaped data, as the guide's
no-print case next to it. The one change is issue 25's: the loop passes
its Python `step` counter into the step function (to log every 100th
step), and a Python argument is part of a `tf.function`'s signature, so
the step is traced again at every call ("5 out of the last 5 calls ...
triggered tf.function retracing"). It prints once per epoch, never a
`step=... loss=...` line.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

inputs = keras.Input(shape=(784,), name="digits")
x = keras.layers.Dense(64, activation="relu")(inputs)
x = keras.layers.Dense(64, activation="relu")(x)
outputs = keras.layers.Dense(10, name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)

optimizer = keras.optimizers.SGD(learning_rate=1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()

rng = np.random.default_rng(0)
x_train = rng.random((2048, 784), dtype=np.float32)
y_train = rng.integers(0, 10, 2048)
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1024, seed=0).batch(64)
train_dataset = train_dataset.prefetch(tf.data.AUTOTUNE)


@tf.function
def train_step(x, y, step):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    train_acc_metric.update_state(y, logits)
    if step % 100 == 0:
        tf.print("step", step, "loss", loss_value)
    return loss_value


for epoch in range(2):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        loss_value = train_step(x_batch_train, y_batch_train, step)
    print(f"epoch {epoch}: training acc {float(train_acc_metric.result()):.4f}")
    train_acc_metric.reset_state()
