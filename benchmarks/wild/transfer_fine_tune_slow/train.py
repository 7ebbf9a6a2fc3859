"""Transfer learning then fine-tuning: two fits of one model.

Modelled on the shape of keras-io's guides/transfer_learning.py (a frozen
base model and a new head trained first, then the base unfrozen and the
whole model fine-tuned at a low learning rate), with a small convolutional
base instead of a downloaded one; offline, synthetic images. Planted problem:
a per-batch callback in the fine-tuning fit that evaluates on a validation
slice after every batch (and keeps a copy of the weights).
"""

import numpy as np
from tensorflow import keras

rng = np.random.default_rng(0)
x = rng.random((1024, 32, 32, 3), dtype=np.float32)
y = rng.integers(0, 2, 1024).astype("float32")

base_model = keras.Sequential(
    [
        keras.Input(shape=(32, 32, 3)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
    ]
)
base_model.trainable = False

inputs = keras.Input(shape=(32, 32, 3))
features = base_model(inputs, training=False)
outputs = keras.layers.Dense(1)(features)
model = keras.Model(inputs, outputs)

model.compile(optimizer=keras.optimizers.Adam(), loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=1, verbose=2)


class WeightSnapshots(keras.callbacks.Callback):
    """Keep the weights and the validation loss after every batch, to plot them later."""

    def on_train_batch_end(self, batch, logs=None):
        self.snapshot = [np.array(w) for w in self.model.get_weights()]
        self.val_loss = self.model.evaluate(x[:256], y[:256], verbose=0)


base_model.trainable = True
model.compile(optimizer=keras.optimizers.Adam(1e-5), loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=2, verbose=2, callbacks=[WeightSnapshots()])
