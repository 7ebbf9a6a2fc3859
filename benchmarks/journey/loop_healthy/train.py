# A training loop written from scratch, as the keras.io guide "Writing a
# training loop from scratch" teaches: GradientTape, the loss object, the
# optimizer, tf.function, tf.print every 10 steps. Nothing is wrong with it:
# the same model, loss, optimizer and data under model.fit give the same
# per-step losses.
#
# Adapted from https://keras.io/guides/writing_a_training_loop_from_scratch/
# (the correct counterpart of tensorflow/tensorflow#28901 and #31184).
import numpy as np
import tensorflow as tf
import keras

BATCH = 64
EPOCHS = 2

rng = np.random.default_rng(7)
x_train = rng.normal(size=(1600, 32)).astype("float32")
y_train = (x_train[:, :3].sum(axis=1) > 0).astype("int64") + (x_train[:, 3] > 1).astype("int64")

train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
train_dataset = train_dataset.shuffle(buffer_size=1024, seed=7).batch(BATCH)

inputs = keras.Input(shape=(32,), name="digits")
h = keras.layers.Dense(64, activation="relu")(inputs)
h = keras.layers.Dense(64, activation="relu")(h)
outputs = keras.layers.Dense(3, name="predictions")(h)
model = keras.Model(inputs=inputs, outputs=outputs)

optimizer = keras.optimizers.Adam(learning_rate=1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss_value


for epoch in range(EPOCHS):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        loss_value = train_step(x_batch_train, y_batch_train)
        if step % 10 == 0:
            tf.print("epoch", epoch, "step", step, "loss", loss_value)
