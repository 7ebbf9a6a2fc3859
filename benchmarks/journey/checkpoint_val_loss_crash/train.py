# Regression on synthetic housing-style features. The checkpoint filename
# template was copied from a tutorial that trained with validation data; this
# script does not pass any.
#
# Adapted from https://github.com/keras-team/keras/issues/15865
# ("KeyError: 'val_loss'" raised from ModelCheckpoint at the end of the first
# epoch: the filepath is formatted with the epoch's logs, which hold no
# val_loss when fit gets no validation data).
import os

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(21)

rng = np.random.default_rng(21)
features = rng.normal(size=(2000, 8)).astype("float32")
prices = (features @ rng.normal(size=(8, 1)) + 0.1 * rng.normal(size=(2000, 1))).astype("float32")

ds = tf.data.Dataset.from_tensor_slices((features, prices))
ds = ds.shuffle(2000, seed=21).batch(32).repeat().prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(8,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1),
])
lr_schedule = keras.optimizers.schedules.ExponentialDecay(5e-3, decay_steps=50, decay_rate=0.8)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr_schedule), loss="mse", metrics=["mae"])

os.makedirs("checkpoints", exist_ok=True)
checkpoint = keras.callbacks.ModelCheckpoint(
    filepath="checkpoints/weights-{epoch:02d}-{val_loss:.3f}.weights.h5",
    save_weights_only=True,
)
early_stop = keras.callbacks.EarlyStopping(monitor="loss", patience=2)
model.fit(ds, epochs=4, steps_per_epoch=12, callbacks=[checkpoint, early_stop], verbose=2)
