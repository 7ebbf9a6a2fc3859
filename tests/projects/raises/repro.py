"""Fixture: raises after the model is built."""

import keras

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
raise ValueError("boom")
