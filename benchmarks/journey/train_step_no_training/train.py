# The keras.io recipe "Customizing what happens in fit()": a Model subclass
# overrides train_step to get at the gradients, but calls the model without
# training=True, so Dropout is off and BatchNormalization uses its moving
# statistics inside the override: the loss it reports (and the training it
# does) differs from Keras's own train_step on the same model.
#
# Adapted from https://keras.io/guides/customizing_what_happens_in_fit/ and
# tensorflow/tensorflow#31184 (training=True forgotten in a custom step).
import numpy as np
import tensorflow as tf
import keras


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x)  # forgot training=True
            loss = self.compute_loss(y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
x = (2.0 * rng.normal(size=(1024, 16)) + 1.0).astype("float32")
y = (x[:, :3].sum(axis=1, keepdims=True) > 3.0).astype("float32")

inputs = keras.Input(shape=(16,))
h = keras.layers.Dense(32)(inputs)
h = keras.layers.BatchNormalization()(h)
h = keras.layers.Activation("relu")(h)
h = keras.layers.Dropout(0.3)(h)
outputs = keras.layers.Dense(1, activation="sigmoid")(h)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=2)
