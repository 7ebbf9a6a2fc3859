"""Fixture: Model.fit on a tiny Dense model (Keras 3).

Also writes its own per-step losses to own_losses.txt, computed independently
of fit: the loss of the batch about to be trained, at the weights it is
trained from (batches in order: shuffle=False)."""

import numpy as np

import keras

BATCH, EPOCHS = 8, 2
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.1).astype("float32")

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
loss_fn = keras.losses.MeanSquaredError()


class OwnLosses(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        sl = slice(batch * BATCH, (batch + 1) * BATCH)
        loss = float(loss_fn(y[sl], self.model(x[sl], training=True)))
        with open("own_losses.txt", "a") as f:
            f.write(repr(loss) + "\n")


model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[OwnLosses()])
print("done")
