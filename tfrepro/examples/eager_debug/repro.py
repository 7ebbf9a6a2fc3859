"""Repro: a tabular model that trains several times slower than it used to.

Someone debugged a shape error with eager execution and left the switch in.
The baseline (every feature off) runs at full speed; with every feature on,
each step is several times slower.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 40
BATCH = 32

# tfrepro: feature run_eagerly -- run tf.functions eagerly (to step through them in a debugger)
# tf.config.run_functions_eagerly(True)
# tfrepro: end

# tfrepro: feature memory_growth -- allocate GPU memory on demand (no-op without GPUs)
# for gpu in tf.config.list_physical_devices("GPU"):
#     tf.config.experimental.set_memory_growth(gpu, True)
# tfrepro: end

keras.utils.set_random_seed(0)

rng = np.random.default_rng(3)
x = rng.normal(size=(512, 20)).astype("float32")
y = (x[:, :3].sum(axis=1) > 0).astype("float32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
# tfrepro: feature cache -- keep the batches in memory after the first epoch
# ds = ds.cache()
# tfrepro: end
ds = ds.repeat()
# tfrepro: feature prefetch -- overlap input preparation with training
# ds = ds.prefetch(tf.data.AUTOTUNE)
# tfrepro: end

model = keras.Sequential(
    [
        keras.Input(shape=(20,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
)

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature reduce_lr -- halve the learning rate on a plateau (patience 100)
# callbacks.append(keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=100))
# tfrepro: end

model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
