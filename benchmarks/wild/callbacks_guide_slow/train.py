"""Custom Keras callbacks, tried one after another.

Modelled on the structure of keras-io's guide "Writing your own callbacks"
(guides/writing_your_own_callbacks.py: a small Dense model on MNIST pixels,
several `fit` calls, each with other callbacks), rewritten here to run
offline: synthetic data of MNIST's shape instead of the download, fewer
samples. Planted problem: a per-batch monitoring callback that runs
`predict` after every training batch, passed to the last `fit` only.
"""

import numpy as np
from tensorflow import keras


def get_model():
    model = keras.Sequential()
    model.add(keras.Input(shape=(784,)))
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


rng = np.random.default_rng(0)
x_train = rng.random((1000, 784), dtype=np.float32)
y_train = rng.integers(0, 10, size=(1000,)).astype("float32")
x_test = rng.random((200, 784), dtype=np.float32)
y_test = rng.integers(0, 10, size=(200,)).astype("float32")


class LossPrinter(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print("epoch {}: loss {:7.2f}".format(epoch, logs["loss"]))


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        self.best_weights = None

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if current < self.best:
            self.best = current
            self.wait = 0
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.model.stop_training = True
                self.model.set_weights(self.best_weights)


class CustomLearningRateScheduler(keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        lr = float(self.model.optimizer.learning_rate.numpy())
        self.model.optimizer.learning_rate.assign(self.schedule(epoch, lr))


def lr_schedule(epoch, lr):
    return {3: 0.05, 6: 0.01, 9: 0.005}.get(epoch, lr)


class PredictionMonitor(keras.callbacks.Callback):
    """Watch the predictions on a few test samples after every batch."""

    def on_train_batch_end(self, batch, logs=None):
        self.last = self.model.predict(x_test[:64], verbose=0)


model = get_model()
model.fit(x_train, y_train, batch_size=128, epochs=1, verbose=0, callbacks=[LossPrinter()])
model.evaluate(x_test, y_test, batch_size=128, verbose=0)

model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=64,
    steps_per_epoch=5,
    epochs=4,
    verbose=0,
    callbacks=[LossPrinter(), EarlyStoppingAtMinLoss()],
)

model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=64,
    steps_per_epoch=5,
    epochs=6,
    verbose=0,
    callbacks=[LossPrinter(), CustomLearningRateScheduler(lr_schedule), PredictionMonitor()],
)
