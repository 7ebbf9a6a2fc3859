# Tabular binary classifier; a custom callback tracks validation AUC after
# every batch so the curve can be plotted at a finer grain than epochs.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/37876
# ("WARNING:tensorflow:Callbacks method `on_train_batch_end` is slow compared to
# the batch time ... Check your callbacks."): work done in on_train_batch_end
# runs on every step and dominates a small model's step time.
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(11)

rng = np.random.default_rng(11)
x = rng.normal(size=(6000, 30)).astype("float32")
w = rng.normal(size=(30,))
y = (x @ w + 0.5 * rng.normal(size=6000) > 0).astype("float32")
x_train, y_train = x[:5000], y[:5000]
x_val, y_val = x[5000:], y[5000:]


class BatchValAUC(keras.callbacks.Callback):
    """Record the validation AUC after every training batch."""

    def __init__(self, x_val, y_val):
        super().__init__()
        self.x_val, self.y_val = x_val, y_val
        self.history = []

    def on_train_batch_end(self, batch, logs=None):
        scores = self.model.predict(self.x_val, verbose=0)
        auc = keras.metrics.AUC()
        auc.update_state(self.y_val, scores)
        self.history.append(float(auc.result()))


train_ds = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shuffle(5000, seed=11)
            .batch(64)
            .prefetch(tf.data.AUTOTUNE))

model = keras.Sequential([
    keras.Input(shape=(30,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])

auc_cb = BatchValAUC(x_val, y_val)
callbacks = [
    auc_cb,
    keras.callbacks.EarlyStopping(monitor="loss", patience=2, restore_best_weights=True),
]
model.fit(train_ds, epochs=2, steps_per_epoch=35, callbacks=callbacks, verbose=2)
print("last batch AUC:", auc_cb.history[-1])
