# Wide MLP; a callback keeps a snapshot of all weights after every batch so
# that the optimisation trajectory can be plotted after training.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/34876
# ("Memory leak in fit() with callback": "CPU Ram progressively gets consumed
# as the fit() works ... This memory leak only happens when a callback is
# assigned"). Here the growth is the callback's own: it keeps every batch's
# copy of the weights (about 8 MB each) alive until training ends.
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(8)

rng = np.random.default_rng(8)
x = rng.normal(size=(4096, 1024)).astype("float32")
y = rng.integers(0, 10, size=4096).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=8).batch(32).prefetch(tf.data.AUTOTUNE)


class WeightTrajectory(keras.callbacks.Callback):
    """Keep the weights after every batch (for a loss-landscape plot)."""

    def __init__(self):
        super().__init__()
        self.snapshots = []

    def on_train_batch_end(self, batch, logs=None):
        self.snapshots.append(self.model.get_weights())


model = keras.Sequential([
    keras.Input(shape=(1024,)),
    keras.layers.Dense(1024, activation="relu"),
    keras.layers.Dense(1024, activation="relu"),
    keras.layers.Dense(10),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

trajectory = WeightTrajectory()
model.fit(ds, epochs=3, steps_per_epoch=25, verbose=2,
          callbacks=[trajectory, keras.callbacks.EarlyStopping(monitor="loss", patience=2)])
print("snapshots kept:", len(trajectory.snapshots))
