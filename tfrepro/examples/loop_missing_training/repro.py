"""Repro: a custom training loop that does not reproduce `model.fit`.

The model has Dropout and BatchNormalization. The baseline trains it with
`model.fit`; the `custom_loop` feature replaces fit with a GradientTape loop
(needed later for gradient surgery) that should give the same per-step loss.
With every feature on, the loss curve no longer matches.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

STEPS = 40
BATCH = 32

keras.utils.set_random_seed(0)

rng = np.random.default_rng(4)
x = (3.0 * rng.normal(size=(512, 20)) + 1.5).astype("float32")
y = (x[:, :4].sum(axis=1) > 6.0).astype("int32")

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
        keras.layers.Dense(64),
        keras.layers.BatchNormalization(),
        keras.layers.Activation("relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(2),
    ]
)
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
model.compile(optimizer=optimizer, loss=loss_fn)


def train_step(xb, yb):
    with tf.GradientTape() as tape:
        logits = model(xb)
        loss = loss_fn(yb, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)
    return loss


# tfrepro: feature tf_function -- compile the custom train step into a graph
# train_step = tf.function(train_step)
# tfrepro: end

callbacks = []
# tfrepro: feature csv_logger -- write per-epoch metrics to a CSV file (fit only)
# callbacks.append(keras.callbacks.CSVLogger(tempfile.mkdtemp() + "/train_log.csv"))
# tfrepro: end
# tfrepro: feature early_stopping -- stop when the loss stops improving (patience 100, fit only)
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=100))
# tfrepro: end

# tfrepro: feature custom_loop -- train with a GradientTape loop instead of model.fit
# for step, (xb, yb) in enumerate(ds.take(STEPS), start=1):
#     loss = train_step(xb, yb)
#     print(f"step={step} loss={float(loss):.6f}")
# tfrepro: else
model.fit(ds, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, shuffle=False, verbose=2)
# tfrepro: end
