# MNIST-style MLP (784 -> 256 -> 256 -> 10), batch 64. Mixed precision was
# switched on "to make training faster", on a machine without a GPU.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/45441
# ("mixed_precision make train and predict very slow when only using cpu":
# 3 s/epoch in float32 against 187 s/epoch with mixed_float16 on CPU).
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(1)

# synthetic stand-in for MNIST: 28x28 images flattened, 10 classes
rng = np.random.default_rng(1)
x_train = rng.random(size=(6400, 784)).astype("float32")
y_train = rng.integers(0, 10, size=6400).astype("int32")

train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
train_ds = train_ds.shuffle(6400, seed=1).batch(64).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(784,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(10),
    keras.layers.Activation("softmax", dtype="float32"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(train_ds, epochs=2, steps_per_epoch=50, verbose=2,
          callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=2)])
