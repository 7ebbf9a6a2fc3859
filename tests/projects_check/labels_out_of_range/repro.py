"""Planted project for `tfrepro check`: a distributed custom training loop
(MirroredStrategy over two logical CPU devices) whose labels are 1-based
(1..10) for a 10-way classifier. `tf.one_hot(10, 10)` is a row of zeros, so
nothing crashes: a tenth of the samples silently teach nothing.
"""

import keras
import numpy as np
import tensorflow as tf

NUM_CLASSES = 10
GLOBAL_BATCH = 64

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 32)).astype("float32")
w = rng.normal(size=(32, NUM_CLASSES)).astype("float32")
y = (x @ w).argmax(axis=1).astype("int32") + 1  # class ids exported 1-based

ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(GLOBAL_BATCH, drop_remainder=True).repeat()

with strategy.scope():
    model = keras.Sequential([
        keras.Input(shape=(32,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(NUM_CLASSES),
    ])
    optimizer = keras.optimizers.Adam(3e-3)
    optimizer.build(model.trainable_variables)  # slots created here, not while tracing the step
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(xb, yb):
    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            per_sample = loss_fn(tf.one_hot(yb, NUM_CLASSES), model(xb, training=True))
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return strategy.reduce("SUM", strategy.run(replica_step, args=(xb, yb)), axis=None)


batches = iter(strategy.experimental_distribute_dataset(ds))
for step in range(1, 41):
    xb, yb = next(batches)
    loss = train_step(xb, yb)
    print(f"step={step} loss={float(loss):.6f}")
