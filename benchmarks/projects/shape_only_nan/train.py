"""Classifier with a hand-written log-softmax layer (data/x.npy, data/y.npy).
`custom_log_softmax` takes log(exp(z) / sum(exp(z))) with no max subtracted:
exp overflows float32 for logits above ~88, on any input once the logits
grow - the NaN depends on the shapes and the model, not on the records."""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
x = np.load("data/x.npy")
y = np.load("data/y.npy")


class LogSoftmax(keras.layers.Layer):
    def call(self, z):
        z = z * 100.0  # a temperature of 0.01
        return tf.math.log(tf.exp(z) / tf.reduce_sum(tf.exp(z), axis=-1, keepdims=True))


head = [keras.layers.Dense(2), keras.layers.Activation("log_softmax")]
# tfrepro: feature custom_log_softmax -- the hand-written log-softmax layer
# head = [keras.layers.Dense(2), LogSoftmax()]
# tfrepro: end
model = keras.Sequential([keras.Input(shape=(6,)), keras.layers.Dense(16, activation="relu"), *head])
model.compile(
    optimizer=keras.optimizers.Adam(1e-2),
    loss=lambda t, p: -tf.reduce_mean(tf.gather(p, tf.cast(tf.reshape(t, [-1]), tf.int32), batch_dims=1)),
)
callbacks = []
# tfrepro: feature early_stopping -- stop when the loss stops improving
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=50))
# tfrepro: end
model.fit(x, y, batch_size=16, epochs=3, callbacks=callbacks, verbose=0)
