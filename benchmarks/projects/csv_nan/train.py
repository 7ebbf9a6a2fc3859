"""Churn-spend regression on the customer export (data/customers.csv, sorted
by age). Some customers report an income of 0; `log_income` takes log(income)."""

import keras
import numpy as np

keras.utils.set_random_seed(0)
table = np.loadtxt("data/customers.csv", delimiter=",", skiprows=1, dtype="float32")

features = table[:, :3].copy()
features[:, 1] = features[:, 1] / 1e5
# tfrepro: feature log_income -- model log(income) instead of income
# features[:, 1] = np.log(table[:, 1]) - 10.0
# tfrepro: end
features[:, 0] = (features[:, 0] - 50) / 20
features[:, 2] = features[:, 2] / 10
target = (table[:, 3] - 250) / 150

model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
callbacks = []
# tfrepro: feature early_stopping -- stop when the loss stops improving
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=50))
# tfrepro: end
# tfrepro: feature reduce_lr -- lower the learning rate on plateaus
# callbacks.append(keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=50))
# tfrepro: end
model.fit(features, target, batch_size=16, epochs=1, shuffle=False, callbacks=callbacks, verbose=0)
