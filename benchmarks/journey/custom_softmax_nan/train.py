# Classifier on raw (un-normalised) 8x8 intensity images with a hand-written
# softmax output layer.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/10142
# ("tf.nn.softmax overflow due to exp(x)": "I ran into a loss = NaN today and
# suspect this is the cause"). The stock softmax subtracts the max logit before
# exp(); this hand-written one does not, so a logit above ~88 overflows float32.
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(7)

NUM_CLASSES = 10
BATCH_SIZE = 32

# pixel intensities 0..255, never divided by 255
rng = np.random.default_rng(7)
x = rng.integers(0, 256, size=(2048, 64)).astype("float32")
y = (x[:, :8].mean(axis=1) // 25.6).astype("int32").clip(0, NUM_CLASSES - 1)


class MySoftmax(keras.layers.Layer):
    """Softmax written out by hand (from the course notes)."""

    def call(self, inputs):
        e = tf.exp(inputs)
        return e / tf.reduce_sum(e, axis=-1, keepdims=True)


train_ds = tf.data.Dataset.from_tensor_slices((x, y))
train_ds = train_ds.shuffle(2048, seed=7).batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(64,)),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(NUM_CLASSES),
    MySoftmax(),
])

lr = keras.optimizers.schedules.ExponentialDecay(1e-3, decay_steps=100, decay_rate=0.9)
model.compile(optimizer=keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])

callbacks = [keras.callbacks.EarlyStopping(monitor="loss", patience=3)]
history = model.fit(train_ds, epochs=3, steps_per_epoch=20, callbacks=callbacks, verbose=2)
print("final loss:", history.history["loss"][-1])
