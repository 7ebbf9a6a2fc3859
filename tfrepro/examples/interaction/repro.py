"""Repro: training crashes at the first step, but only with every feature on.

`RobustClip` clips each sample to its 1st..99th percentile with NumPy, via
`tf.numpy_function` (the team's "custom op"). It works in graph mode. XLA
compilation (`jit_compile=True`) also works on the stock model. Together they
crash: XLA cannot compile a Python callback.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 30
BATCH = 32

keras.utils.set_random_seed(0)


def _percentile_clip(x):
    lo, hi = np.percentile(x, [1.0, 99.0], axis=-1, keepdims=True)
    return np.clip(x, lo, hi).astype(x.dtype)


class RobustClip(keras.layers.Layer):
    """Per-sample percentile clipping, computed in NumPy."""

    def call(self, x):
        y = tf.numpy_function(_percentile_clip, [x], x.dtype, stateful=False)
        y.set_shape(x.shape)
        return y


rng = np.random.default_rng(6)
x = rng.standard_t(df=2.0, size=(512, 32)).astype("float32")  # heavy tails
y = (np.clip(x[:, :5], -3, 3).sum(axis=1) > 0).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
# tfrepro: feature cache -- keep the batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

layers = [keras.Input(shape=(32,))]
# tfrepro: feature robust_clip -- clip outliers per sample with a NumPy custom op
# layers.append(RobustClip())
# tfrepro: end
layers += [keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)]
model = keras.Sequential(layers)

jit = False
# tfrepro: feature xla -- compile the train step with XLA (jit_compile=True)
# jit = True
# tfrepro: end
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=jit,
)

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
