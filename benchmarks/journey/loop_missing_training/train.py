# Custom GradientTape training loop (the author needs per-step gradient
# access later) for a small MLP with BatchNormalization and Dropout. It trains
# noticeably worse than the same model under model.fit.
#
# Adapted from https://github.com/tensorflow/tensorflow/issues/31184
# ("Transfer learning trained by custom TF 2.0 training loop performs worse
# than keras fit"); the fix in the thread was to call the model with
# training=True inside the tape, which this loop forgets, so BatchNormalization
# uses its moving statistics and Dropout is off.
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(4)

STEPS = 40
BATCH = 32

rng = np.random.default_rng(4)
x = (3.0 * rng.normal(size=(1024, 20)) + 1.5).astype("float32")
y = (x[:, :4].sum(axis=1) > 6.0).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.shuffle(1024, seed=4).batch(BATCH).repeat().prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(20,)),
    keras.layers.Dense(64),
    keras.layers.BatchNormalization(),
    keras.layers.Activation("relu"),
    keras.layers.Dropout(0.3),
    keras.layers.Dense(2),
])
schedule = keras.optimizers.schedules.CosineDecay(initial_learning_rate=1e-3, decay_steps=STEPS)
optimizer = keras.optimizers.Adam(schedule)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        logits = model(xb)
        loss = loss_fn(yb, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step, (xb, yb) in enumerate(ds.take(STEPS), start=1):
    loss = train_step(xb, yb)
    print(f"step={step} loss={float(loss):.6f}")
