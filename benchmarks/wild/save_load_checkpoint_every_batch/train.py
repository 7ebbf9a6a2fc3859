"""Save and load models: weight checkpoints during training.

Modelled on the TensorFlow tutorial site/en/tutorials/keras/save_and_load
(the first 1000 MNIST examples flattened and scaled, a Dense(512) +
Dropout + Dense(10) model from `create_model()`; a fit with a
ModelCheckpoint saving the weights each epoch, an untrained model
evaluated, the weights loaded and re-evaluated; then a new model trained
with uniquely named checkpoints every few batches, the latest one loaded
and evaluated, and the weights saved by hand), rewritten to run offline:
synthetic MNIST-shaped digits instead of keras.datasets.mnist, fewer
epochs, Keras 3 file names (`.weights.h5`), the latest checkpoint found by
listing the directory (tf.train.latest_checkpoint reads only TF
checkpoints). Planted problem, a common misreading of `save_freq` (an
integer counts batches, not epochs): the second fit saves the weights
after every batch (`save_freq=1`; the tutorial: `5 * batch_size`).
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

print(tf.version.VERSION)

rng = np.random.default_rng(0)
train_images = (rng.random((1000, 28, 28)) * 255).astype("uint8")
test_images = (rng.random((1000, 28, 28)) * 255).astype("uint8")
train_labels = rng.integers(0, 10, 1000).astype("uint8")
test_labels = rng.integers(0, 10, 1000).astype("uint8")

train_images = train_images.reshape(-1, 28 * 28) / 255.0
test_images = test_images.reshape(-1, 28 * 28) / 255.0


def create_model():
    model = tf.keras.Sequential(
        [
            keras.Input(shape=(784,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=tf.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.metrics.SparseCategoricalAccuracy()],
    )
    return model


model = create_model()
model.summary()

checkpoint_path = "training_1/cp.weights.h5"
checkpoint_dir = os.path.dirname(checkpoint_path)
cp_callback = tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_path, save_weights_only=True, verbose=1)
model.fit(
    train_images,
    train_labels,
    epochs=2,  # the tutorial: 10
    validation_data=(test_images, test_labels),
    callbacks=[cp_callback],
)
print(os.listdir(checkpoint_dir))

model = create_model()
loss, acc = model.evaluate(test_images, test_labels, verbose=2)
print(f"Untrained model, accuracy: {100 * acc:5.2f}%")
model.load_weights(checkpoint_path)
loss, acc = model.evaluate(test_images, test_labels, verbose=2)
print(f"Restored model, accuracy: {100 * acc:5.2f}%")

checkpoint_path = "training_2/cp-{epoch:04d}.weights.h5"
checkpoint_dir = os.path.dirname(checkpoint_path)
batch_size = 32
cp_callback = tf.keras.callbacks.ModelCheckpoint(
    filepath=checkpoint_path, verbose=1, save_weights_only=True, save_freq=1
)
model = create_model()
os.makedirs(checkpoint_dir, exist_ok=True)
model.save_weights(checkpoint_path.format(epoch=0))
model.fit(
    train_images,
    train_labels,
    epochs=3,  # the tutorial: 50
    batch_size=batch_size,
    callbacks=[cp_callback],
    validation_data=(test_images, test_labels),
    verbose=0,
)
print(os.listdir(checkpoint_dir))

latest = os.path.join(checkpoint_dir, sorted(os.listdir(checkpoint_dir))[-1])
model = create_model()
model.load_weights(latest)
loss, acc = model.evaluate(test_images, test_labels, verbose=2)
print(f"Restored model, accuracy: {100 * acc:5.2f}%")

os.makedirs("checkpoints", exist_ok=True)
model.save_weights("./checkpoints/my_checkpoint.weights.h5")
model = create_model()
model.load_weights("./checkpoints/my_checkpoint.weights.h5")
loss, acc = model.evaluate(test_images, test_labels, verbose=2)
print(f"Restored model, accuracy: {100 * acc:5.2f}%")
