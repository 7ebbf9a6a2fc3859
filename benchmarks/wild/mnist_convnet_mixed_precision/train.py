"""A simple convnet on MNIST-shaped images, with mixed precision turned on.

Modelled on keras-io's examples/vision/mnist_convnet.py (two Conv2D +
MaxPooling blocks, Dropout, a softmax head, Adam, batch 128), rewritten to
run offline on synthetic 28x28 images and fewer samples. Planted problem:
the mixed_float16 policy on a CPU without float16 hardware: slower, as
documented (tensorflow/tensorflow#45441).
"""

import numpy as np
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")

num_classes = 10
input_shape = (28, 28, 1)
rng = np.random.default_rng(0)
x_train = rng.random((4096, 28, 28, 1), dtype=np.float32)
y_train = keras.utils.to_categorical(rng.integers(0, num_classes, 4096), num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(num_classes, activation="softmax", dtype="float32"),
    ]
)
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=128, epochs=2, validation_split=0.1)
