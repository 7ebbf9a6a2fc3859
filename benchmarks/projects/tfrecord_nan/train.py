"""Classifier trained from TFRecords (data/train.tfrecord). Feature 3 is 0 in
the last records; `inverse_scale` divides by it."""

import keras
import tensorflow as tf

keras.utils.set_random_seed(0)
SPEC = {"x": tf.io.FixedLenFeature([4], tf.float32), "y": tf.io.FixedLenFeature([1], tf.float32)}


def parse(record):
    ex = tf.io.parse_single_example(record, SPEC)
    x = ex["x"]
    # tfrepro: feature inverse_scale -- scale by the inverse of feature 3
    # x = x / x[3]
    # tfrepro: end
    return x, ex["y"]


ds = tf.data.TFRecordDataset("data/train.tfrecord").map(parse).batch(16)
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss=keras.losses.BinaryCrossentropy(from_logits=True))
callbacks = []
# tfrepro: feature early_stopping -- stop when the loss stops improving
# callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", patience=50))
# tfrepro: end
model.fit(ds, epochs=1, callbacks=callbacks, verbose=0)
