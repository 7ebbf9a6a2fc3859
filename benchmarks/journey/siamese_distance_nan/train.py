# A siamese network trained with a hand-written loop: one shared encoder for
# both inputs, a Lambda layer for the Euclidean distance of the two
# embeddings, a sigmoid unit on the distance ("same or not"). The loss turns
# NaN as soon as a batch holds a pair of two identical inputs: the distance
# is sqrt(0), the gradient of sqrt at 0 is infinite, and the backward pass
# multiplies it by the zero difference of the embeddings (0 * inf = NaN), so
# one step writes NaN into every weight.
#
# Adapted from https://github.com/keras-team/keras/issues/9097 ("NaN loss
# when using euclidean distance for siamese network (due to K.sqrt)": the
# distance function of Keras's mnist_siamese example without its epsilon,
# NaN "when two inputs are the same"), written for Keras 3 (keras.ops for K)
# with the distance -> sigmoid head of the keras.io siamese example, in a
# GradientTape loop that prints its own progress lines.
import numpy as np
import tensorflow as tf
import keras
from keras import ops

EPOCHS = 2
BATCH = 32

rng = np.random.default_rng(3)
centers = rng.normal(size=(10, 24)).astype("float32")
digits = rng.integers(0, 10, size=400)
x = centers[digits] + 0.3 * rng.normal(size=(400, 24)).astype("float32")
by_class = [np.flatnonzero(digits == d) for d in range(10)]


def create_pairs(n):
    """Half positive pairs (two samples of one class, drawn with replacement), half negative."""
    a, b, same = [], [], []
    for i in range(n):
        d = i % 10
        if i % 2 == 0:
            j, k = rng.choice(by_class[d], size=2)
            same.append(1.0)
        else:
            j = rng.choice(by_class[d])
            k = rng.choice(by_class[(d + rng.integers(1, 10)) % 10])
            same.append(0.0)
        a.append(x[j])
        b.append(x[k])
    return np.stack(a), np.stack(b), np.array(same, dtype="float32")


pairs_a, pairs_b, labels = create_pairs(1024)
train_ds = tf.data.Dataset.from_tensor_slices(((pairs_a, pairs_b), labels)).shuffle(1024, seed=3).batch(BATCH)


def euclidean_distance(vects):
    x, y = vects
    return ops.sqrt(ops.sum(ops.square(x - y), axis=1, keepdims=True))


keras.utils.set_random_seed(3)
encoder = keras.Sequential(
    [keras.Input((24,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(16)], name="encoder"
)
input_a = keras.Input((24,))
input_b = keras.Input((24,))
distance = keras.layers.Lambda(euclidean_distance)([encoder(input_a), encoder(input_b)])
same = keras.layers.Dense(1, activation="sigmoid")(distance)
model = keras.Model([input_a, input_b], same)
optimizer = keras.optimizers.RMSprop(learning_rate=1e-3)
loss_fn = keras.losses.BinaryCrossentropy()


@tf.function
def train_step(pairs, y):
    with tf.GradientTape() as tape:
        prob = model(pairs, training=True)
        loss = loss_fn(y, prob)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(EPOCHS):
    for step, (pairs, y) in enumerate(train_ds):
        loss = train_step(pairs, y)
        if step % 8 == 0:
            print(f"Epoch {epoch + 1}/{EPOCHS} - batch {step} - loss: {float(loss):.4f}")
