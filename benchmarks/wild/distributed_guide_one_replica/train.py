"""Multi-device training with MirroredStrategy, run on one CPU.

Modelled on keras-io's guides/distributed_training_with_tensorflow.py (a
model built and compiled inside `strategy.scope()`, a tf.data pipeline with
the global batch size), rewritten to run offline on synthetic MNIST-shaped
data. On this machine the strategy has one replica: any slowdown is its
documented overhead, not a bug.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras


def get_compiled_model():
    inputs = keras.Input(shape=(784,))
    x = keras.layers.Dense(256, activation="relu")(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def get_dataset(batch_size):
    rng = np.random.default_rng(0)
    x = rng.random((4096, 784), dtype=np.float32)
    y = rng.integers(0, 10, 4096)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")
with strategy.scope():
    model = get_compiled_model()
train_dataset = get_dataset(64 * strategy.num_replicas_in_sync)
model.fit(train_dataset, epochs=2)
