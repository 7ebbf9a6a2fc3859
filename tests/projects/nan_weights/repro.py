"""Fixture: weights go NaN while the loss stays finite (Keras 3, Model.fit).

Hand-written ReLUs (`tf.where(v > 0, v, 0)`) over the hidden units and a norm
feature. Sample 0 is all zeros, so at step 1 its hidden vector is zero and
the gradient of `tf.norm` at zero is NaN: the hidden kernel turns NaN while
the loss of step 1 is finite. From then on the `tf.where` ReLUs map the NaN
activations to 0 (tf.nn.relu would propagate them), the output is
sigmoid(bias) with balanced labels, and the loss stays near ln 2 = 0.6931
while the kernel holds NaN."""

import numpy as np
import tensorflow as tf

import keras

BATCH, EPOCHS = 8, 2
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
x[0] = 0.0
y = np.tile(np.array([[1.0], [0.0]], dtype="float32"), (32, 1))


class NormFeature(keras.layers.Layer):
    def call(self, h):
        n = tf.norm(h, axis=-1, keepdims=True)
        h = tf.where(h > 0, h, tf.zeros_like(h))
        return tf.concat([h, tf.where(n >= 0, n, tf.zeros_like(n))], axis=-1)


keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input((4,)),
    keras.layers.Dense(8, use_bias=False, name="hidden"),
    NormFeature(),
    keras.layers.Dense(1, activation="sigmoid", name="out"),
])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy")
model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
print("done")
