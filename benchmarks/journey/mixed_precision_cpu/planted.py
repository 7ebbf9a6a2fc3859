# How large the planted cost is on this machine: the same model, data and
# batch as train.py, built once under float32 and once under mixed_float16 in
# one process, fitted in alternating rounds; a per-batch timer takes each
# step's time. Prints one JSON line: the ratio of the median step times.
# The journey suite runs this first: a slowdown the CPU does not show
# (TF's oneDNN kernels make a float16 matmul as cheap as a float32 one on
# some CPUs) is not one tfrepro can be expected to find.
import json
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(1)
x_train = rng.random(size=(6400, 784)).astype("float32")
y_train = rng.integers(0, 10, size=6400).astype("int32")
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64).repeat()


def build(policy: str) -> keras.Model:
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input(shape=(784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


class Timer(keras.callbacks.Callback):
    def __init__(self, into: list) -> None:
        super().__init__()
        self.into = into

    def on_train_batch_begin(self, batch, logs=None):
        self.t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.into.append(time.perf_counter() - self.t)


models = {"off": build("float32"), "on": build("mixed_float16")}
steps: dict = {"off": [], "on": []}
for name, model in models.items():
    model.fit(train_ds, epochs=1, steps_per_epoch=10, verbose=0)  # trace and warm up
for _ in range(4):
    for name, model in models.items():
        model.fit(train_ds, epochs=1, steps_per_epoch=50, verbose=0, callbacks=[Timer(steps[name])])
on, off = statistics.median(steps["on"]), statistics.median(steps["off"])
print(
    json.dumps(
        {
            "ratio": round(on / off, 3),
            "on_ms": round(on * 1e3, 3),
            "off_ms": round(off * 1e3, 3),
            "steps": len(steps["on"]),
        }
    )
)
