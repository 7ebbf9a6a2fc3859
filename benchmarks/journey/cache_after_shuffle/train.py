# Image-feature classifier with an "optimised" input pipeline: the expensive
# decoding step is cached after the first epoch. The cache sits after the
# shuffle, so every epoch replays the first epoch's order.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/53242
# ("when you use cache operation on your dataset, the order will be 'frozen'
# and so you will only benefit the shuffle once ... in every epoch I will have
# the same order").
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(13)

rng = np.random.default_rng(13)
raw = rng.integers(0, 256, size=(320, 48)).astype("uint8")
labels = (raw[:, :6].astype("float32").mean(axis=1) > 127).astype("int32")


def decode(x, y):
    # stands in for JPEG decoding + resizing
    x = tf.cast(x, tf.float32) / 255.0
    return x, y


ds = tf.data.Dataset.from_tensor_slices((raw, labels))
ds = ds.shuffle(320, seed=13)
ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.cache()
ds = ds.batch(32).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(48,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(2),
])
model.compile(optimizer=keras.optimizers.Adam(3e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(ds, epochs=5, verbose=2,
          callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=2, restore_best_weights=True)])
