# Linear regression trained with a hand-written GradientTape loop: the loss
# plateaus near the variance of the targets while model.fit on the same model
# and data converges.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/28901
# ("GradientTape gives different result from model.fit"; also #43312 and
# #49907): the labels come out of the dataset with shape (batch,) while the
# model predicts (batch, 1), so `y - pred` broadcasts to (batch, batch) and
# the hand-written mean squared error averages every label against every
# prediction. Keras's fit brings both to the same rank before the loss.
import numpy as np
import tensorflow as tf
from tensorflow import keras

EPOCHS = 2
STEPS_PER_EPOCH = 25
BATCH = 32

rng = np.random.default_rng(1)
features = rng.normal(size=(2048, 8)).astype("float32")
true_w = rng.normal(size=(8,)).astype("float32")
targets = (features @ true_w + 0.1 * rng.normal(size=(2048,))).astype("float32")  # shape (N,)

dataset = (
    tf.data.Dataset.from_tensor_slices((features, targets))
    .shuffle(2048, seed=1)
    .batch(BATCH)
    .repeat()
    .prefetch(tf.data.AUTOTUNE)
)

model = keras.Sequential([
    keras.layers.Input(shape=(8,)),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1),
])
optimizer = keras.optimizers.SGD(learning_rate=0.05)


@tf.function
def train_step(x_batch, y_batch):
    with tf.GradientTape() as tape:
        predictions = model(x_batch, training=True)
        loss = tf.reduce_mean(tf.square(y_batch - predictions))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


for epoch in range(EPOCHS):
    for step, (x_batch, y_batch) in enumerate(dataset.take(STEPS_PER_EPOCH)):
        loss = train_step(x_batch, y_batch)
        if step % 5 == 0:
            print(f"Epoch {epoch + 1}/{EPOCHS} - batch {step} - loss: {float(loss):.4f}")
    print(f"Epoch {epoch + 1} done")
