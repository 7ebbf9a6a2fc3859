"""Timeseries classification from scratch: a fully convolutional network on FordA.

Modelled on keras-io's examples/timeseries/timeseries_classification_from_scratch.py
(univariate series of 500 points reshaped to one channel, labels -1/1
mapped to 0/1, a shuffle before validation_split, three Conv1D +
BatchNormalization + ReLU blocks, global average pooling, a softmax head;
ModelCheckpoint, ReduceLROnPlateau and EarlyStopping on val_loss; the best
model reloaded and scored on the test set), rewritten to run offline:
synthetic z-normalised series instead of the downloaded TSV files, fewer
series and epochs; the plots (matplotlib) and plot_model (pydot) left out,
accuracy computed with numpy instead of scikit-learn. Healthy: no planted
problem.
"""

import numpy as np
from tensorflow import keras


def synthetic_forda(n, length=500, seed=0):
    """FordA-shaped: a label column (-1/1) then `length` z-normalised values."""
    rng = np.random.default_rng(seed)
    y = rng.choice([-1, 1], n)
    t = np.linspace(0, 20 * np.pi, length)
    x = np.sin(t[None, :] * (1.0 + 0.1 * y[:, None])) + 0.5 * rng.standard_normal((n, length))
    x = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
    return x, y.astype(int)


x_train, y_train = synthetic_forda(640, seed=0)  # FordA_TRAIN: 3601 series
x_test, y_test = synthetic_forda(256, seed=1)  # FordA_TEST: 1320 series

x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1))
x_test = x_test.reshape((x_test.shape[0], x_test.shape[1], 1))

num_classes = len(np.unique(y_train))

idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]

y_train[y_train == -1] = 0
y_test[y_test == -1] = 0


def make_model(input_shape):
    input_layer = keras.layers.Input(input_shape)

    conv1 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(input_layer)
    conv1 = keras.layers.BatchNormalization()(conv1)
    conv1 = keras.layers.ReLU()(conv1)

    conv2 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv1)
    conv2 = keras.layers.BatchNormalization()(conv2)
    conv2 = keras.layers.ReLU()(conv2)

    conv3 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv2)
    conv3 = keras.layers.BatchNormalization()(conv3)
    conv3 = keras.layers.ReLU()(conv3)

    gap = keras.layers.GlobalAveragePooling1D()(conv3)
    output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)
    return keras.models.Model(inputs=input_layer, outputs=output_layer)


model = make_model(input_shape=x_train.shape[1:])

epochs = 3  # the example: 500
batch_size = 32

callbacks = [
    keras.callbacks.ModelCheckpoint("best_model.keras", save_best_only=True, monitor="val_loss"),
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=20, min_lr=0.0001),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=50, verbose=1),
]
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(
    x_train,
    y_train,
    batch_size=batch_size,
    epochs=epochs,
    callbacks=callbacks,
    validation_split=0.2,
    verbose=1,
)

model = keras.models.load_model("best_model.keras")
y_pred = model.predict(x_test).argmax(axis=1)
print("Test accuracy", float(np.mean(y_pred == y_test)))
