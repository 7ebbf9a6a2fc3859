"""Repro: the loss goes NaN at step ~600, in the last batches of the epoch.

A customer table (a CSV-like array: age, income, tenure, spend), exported
sorted by age and read without shuffling. The oldest customers (the last
rows) report an income of 0. `log_income` feeds log(income) to the model:
log(0) = -inf, and the loss goes NaN at the first batch that holds such a
row, step ~605 of 620 - long past a fixed 50-step trial.
"""

import keras
import numpy as np

BATCH = 16
ROWS = 620 * BATCH
BAD_ROWS = 240  # the last 15 batches

keras.utils.set_random_seed(0)
rng = np.random.default_rng(3)
age = np.sort(rng.uniform(18, 90, ROWS))
income = rng.lognormal(10, 0.5, ROWS)
income[-BAD_ROWS:] = 0.0  # retired: no income reported
tenure = rng.uniform(0, 20, ROWS)
spend = 0.01 * income + 5 * tenure + rng.normal(0, 10, ROWS)
table = np.stack([age, income, tenure, spend], axis=1).astype("float32")  # sorted by age

features = table[:, [0, 1, 2]].copy()
features[:, 1] = features[:, 1] / 1e5
# tfrepro: feature log_income -- model log(income) instead of income
# features[:, 1] = np.log(table[:, 1]) - 10.0
# tfrepro: end
features[:, 0] = (features[:, 0] - 50) / 20
target = (table[:, 3] - 250) / 150

model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")

callbacks = []
# tfrepro: feature early_stopping -- stop when the loss stops improving
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=50))
# tfrepro: end
# tfrepro: feature terminate_on_nan -- stop at a NaN loss
# callbacks.append(keras.callbacks.TerminateOnNaN())
# tfrepro: end
shuffle = False
# tfrepro: feature reduce_lr -- lower the learning rate on plateaus
# callbacks.append(keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=50))
# tfrepro: end

model.fit(features, target, batch_size=BATCH, epochs=1, shuffle=shuffle, callbacks=callbacks, verbose=0)
print("done")
