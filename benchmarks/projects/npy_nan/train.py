"""Binary classifier on sensor readings (data/x.npy, data/y.npy). Sensor 7
drops out (NaN) in a few records; `all_sensors` feeds it to the model."""

import keras
import numpy as np

keras.utils.set_random_seed(0)
x = np.load("data/x.npy")
y = np.load("data/y.npy")
x = x[:, :7]
# tfrepro: feature all_sensors -- use all 8 sensors, not the first 7
# x = np.load("data/x.npy")
# tfrepro: end
model = keras.Sequential([keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.BinaryCrossentropy(from_logits=True))
callbacks = []
# tfrepro: feature early_stopping -- stop when the loss stops improving
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=50))
# tfrepro: end
model.fit(x, y, batch_size=32, epochs=1, shuffle=False, callbacks=callbacks, verbose=0)
