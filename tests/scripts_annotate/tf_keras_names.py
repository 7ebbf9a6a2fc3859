"""Image-free toy classifier written against the `tf.keras` namespace only
(the style of most TF 2.x tutorials): subclassed model, custom layer,
cosine learning-rate decay, callbacks kept in a list."""

import os

import numpy as np
import tensorflow as tf

EPOCHS = 2
STEPS = int(os.environ.get("TRAIN_STEPS", "8"))


class Linear(tf.keras.layers.Layer):
    """y = xW + b, written out by hand."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros")

    def call(self, x):
        return tf.matmul(x, self.w) + self.b


class Classifier(tf.keras.Model):
    def __init__(self, num_classes):
        super().__init__()
        self.hidden = Linear(32)
        self.act = tf.keras.layers.ReLU()
        self.out = tf.keras.layers.Dense(num_classes)

    def call(self, x, training=False):
        return self.out(self.act(self.hidden(x)))


class PrintEvery(tf.keras.callbacks.Callback):
    def __init__(self, every=5):
        super().__init__()
        self.every = every

    def on_train_batch_end(self, batch, logs=None):
        if batch % self.every == 0:
            print("batch", batch, "loss", logs["loss"])


def get_data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(640, 10)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    return x, y


def main():
    tf.keras.utils.set_random_seed(0)
    x, y = get_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(640, seed=0, reshuffle_each_iteration=False).batch(32)

    model = Classifier(num_classes=2)
    lr = tf.keras.optimizers.schedules.CosineDecay(initial_learning_rate=0.05, decay_steps=100)
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=lr),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    printer = PrintEvery(every=4)
    callbacks = [printer, tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=1)]
    model.fit(ds, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=callbacks, verbose=2)


if __name__ == "__main__":
    main()
