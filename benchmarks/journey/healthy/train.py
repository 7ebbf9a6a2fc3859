# Binary text-feature classifier with the usual production trimmings: a
# shuffled, batched, prefetched tf.data pipeline, a cosine learning-rate
# schedule, checkpointing, CSV logging and early stopping. Nothing is wrong
# with it: the author only asked why two runs do not print the same losses.
#
# Adapted from https://github.com/keras-team/keras/issues/2743
# ("Each time I run the Keras, I get different result"): the answer there is
# seeding (and shuffling is expected to change the loss curve, on purpose).
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(2024)

VOCAB_FEATURES = 100
rng = np.random.default_rng(2024)
x = rng.poisson(0.3, size=(3000, VOCAB_FEATURES)).astype("float32")
w = rng.normal(size=(VOCAB_FEATURES,))
y = (x @ w > 0).astype("float32")
x_train, y_train, x_val, y_val = x[:2500], y[:2500], x[2500:], y[2500:]


def tfidf_like(features, label):
    return tf.math.log1p(features), label


train_ds = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shuffle(2500, seed=2024, reshuffle_each_iteration=True)
            .map(tfidf_like, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(50)
            .prefetch(tf.data.AUTOTUNE))
val_ds = tf.data.Dataset.from_tensor_slices((x_val, y_val)).map(tfidf_like).batch(100)

model = keras.Sequential([
    keras.Input(shape=(VOCAB_FEATURES,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
schedule = keras.optimizers.schedules.CosineDecay(initial_learning_rate=2e-3, decay_steps=500)
model.compile(optimizer=keras.optimizers.Adam(schedule), loss="binary_crossentropy", metrics=["accuracy"])

callbacks = [
    keras.callbacks.ModelCheckpoint("best_model.keras", monitor="val_loss", save_best_only=True),
    keras.callbacks.CSVLogger("training_log.csv"),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=3, restore_best_weights=True),
]
history = model.fit(train_ds, validation_data=val_ds, epochs=5, steps_per_epoch=10, callbacks=callbacks, verbose=2)
print("best val_loss:", min(history.history["val_loss"]))
