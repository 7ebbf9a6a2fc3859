# Small CNN on 16x16 grayscale patches. While chasing a shape error the author
# followed the hint in TensorFlow's error message and turned on eager
# execution of tf.functions, and never turned it off again.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/30561
# ("Eager execution drastically increases `tf.keras.Model.fit` runtimes"); the
# switch is the one TensorFlow's own errors recommend ("Please use
# `Model.compile(..., run_eagerly=True)`, or
# `tf.config.run_functions_eagerly(True)` for more information",
# https://github.com/tensorflow/tensorflow/issues/54398).
import keras
import numpy as np
import tensorflow as tf

tf.config.run_functions_eagerly(True)  # TODO remove, debugging the reshape error
keras.utils.set_random_seed(5)

rng = np.random.default_rng(5)
images = rng.random(size=(1536, 16, 16, 1)).astype("float32")
labels = (images[:, :8, :, 0].mean(axis=(1, 2)) > images[:, 8:, :, 0].mean(axis=(1, 2))).astype("int32")


def preprocess(img, label):
    img = (img - 0.5) / 0.29
    return img, label


ds = tf.data.Dataset.from_tensor_slices((images, labels))
ds = ds.shuffle(1536, seed=5).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.batch(32).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(16, 16, 1)),
    keras.layers.Conv2D(8, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(2),
])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
model.fit(ds, epochs=2, steps_per_epoch=24, verbose=2,
          callbacks=[keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1)])
