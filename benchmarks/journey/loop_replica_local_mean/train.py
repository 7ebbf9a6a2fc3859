# A custom training loop under MirroredStrategy (two replicas; on this
# CPU-only box the CPU is split into two logical devices). Each replica
# averages its loss over its own half of the batch, so the gradients the
# strategy sums are twice the global batch's: the loss printed per step is
# twice what the same loop reports on one device, and training runs at twice
# the learning rate.
#
# Adapted from keras-team/keras#15509 and the tf.distribute custom-training
# tutorial's warning: "scale the loss by the GLOBAL batch size"
# (tf.nn.compute_average_loss), which this loop forgets (reduce_mean per
# replica).
import numpy as np
import tensorflow as tf
import keras

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL_BATCH = 32
STEPS = 40

rng = np.random.default_rng(3)
x = rng.normal(size=(2048, 10)).astype("float32")
y = (x @ rng.normal(size=(10, 1)) + 0.1).astype("float32")

dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    model = keras.Sequential([
        keras.Input((10,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ])
    optimizer = keras.optimizers.SGD(learning_rate=0.01)


def replica_step(xb, yb):
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        loss = tf.reduce_mean(tf.square(yb - pred))  # averaged over this replica's batch only
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def train_step(xb, yb):
    per_replica = strategy.run(replica_step, args=(xb, yb))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


it = iter(dist_dataset)
for step in range(STEPS):
    loss = train_step(*next(it))
    if step % 10 == 0:
        tf.print("step", step, "loss", loss)
