"""The Antirectifier custom layer on MNIST-shaped vectors.

Modelled on keras-io's examples/keras_recipes/antirectifier.py (a custom
layer that centres its input, concatenates its positive and negative parts
and projects them back to the input's width with a learned kernel; two of
them between Dense(256) layers, Dropout, RMSprop, from_logits loss,
validation_split 0.15, then evaluate), rewritten to run offline: synthetic
784-pixel vectors instead of the downloaded MNIST, fewer samples and
epochs. Healthy: no planted problem.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers


class Antirectifier(layers.Layer):
    def __init__(self, initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        output_dim = input_shape[-1]
        self.kernel = self.add_weight(
            shape=(output_dim * 2, output_dim), initializer=self.initializer, name="kernel", trainable=True
        )

    def call(self, inputs):
        inputs -= tf.reduce_mean(inputs, axis=-1, keepdims=True)
        positive = tf.nn.relu(inputs)
        negative = tf.nn.relu(-inputs)
        both = tf.concat([positive, negative], axis=-1)
        return tf.matmul(both, self.kernel)

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config


batch_size = 128
num_classes = 10
epochs = 2

# Offline: MNIST-shaped uint8 images (60000 -> 4096 train, 10000 -> 512 test).
rng = np.random.default_rng(1)
x_train = (rng.random((4096, 28, 28)) * 255).astype("uint8")
y_train = rng.integers(0, num_classes, 4096).astype("uint8")
x_test = (rng.random((512, 28, 28)) * 255).astype("uint8")
y_test = rng.integers(0, num_classes, 512).astype("uint8")

x_train = x_train.reshape(-1, 784).astype("float32") / 255
x_test = x_test.reshape(-1, 784).astype("float32") / 255
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")

model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        layers.Dense(256),
        Antirectifier(),
        layers.Dense(256),
        Antirectifier(),
        layers.Dropout(0.5),
        layers.Dense(10),
    ]
)
model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.15)
model.evaluate(x_test, y_test)
