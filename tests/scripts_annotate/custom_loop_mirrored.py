#!/usr/bin/env python
"""Custom training loop for a small text-free classifier under MirroredStrategy.

We train with our own loop (instead of `fit`) because the production version
accumulates extra statistics per step. On a workstation without GPUs the CPU is
split into logical devices so that the distributed code path still runs.

    python custom_loop_mirrored.py --steps 200 --per-replica-batch 16

Each step prints `step=<n> loss=<value>` so runs can be compared.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import tensorflow as tf
import keras

NUM_CLASSES = 4
NUM_FEATURES = 12
NUM_REPLICAS = 2


# --------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------
def configure_devices(num_replicas: int) -> list[str]:
    """Give each replica a device: GPUs when there are some, else logical CPUs."""
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        return [f"/gpu:{i}" for i in range(len(gpus))]
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_replicas)]
        )
    except RuntimeError:
        pass  # TensorFlow already initialised (e.g. in a notebook)
    return [d.name for d in tf.config.list_logical_devices("CPU")][:num_replicas]


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------
def synthetic_examples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs, one per class: the shapes and dtypes of the real features."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(NUM_CLASSES, NUM_FEATURES))
    labels = rng.integers(0, NUM_CLASSES, size=n)
    features = centers[labels] + rng.normal(size=(n, NUM_FEATURES))
    return features.astype("float32"), labels.astype("int32")


def make_dataset(features, labels, global_batch: int) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    ds = ds.shuffle(2048, seed=1, reshuffle_each_iteration=False).repeat()
    return ds.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------
def build_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(NUM_FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )


# --------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "20")))
    p.add_argument("--per-replica-batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--debug", action="store_true", help="run tf.functions eagerly")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    devices = configure_devices(NUM_REPLICAS)
    tf.config.run_functions_eagerly(args.debug)
    keras.utils.set_random_seed(args.seed)

    strategy = tf.distribute.MirroredStrategy(devices=devices)
    replicas = strategy.num_replicas_in_sync
    global_batch = args.per_replica_batch * replicas
    print(f"replicas={replicas} global_batch={global_batch}")

    features, labels = synthetic_examples(4096, args.seed)
    dist_ds = strategy.experimental_distribute_dataset(make_dataset(features, labels, global_batch))

    with strategy.scope():
        model = build_model()
        schedule = keras.optimizers.schedules.PiecewiseConstantDecay(
            boundaries=[1000], values=[args.lr, args.lr * 0.1]
        )
        optimizer = keras.optimizers.SGD(learning_rate=schedule)
        loss_obj = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none"
        )
        train_acc = keras.metrics.SparseCategoricalAccuracy()

    def compute_loss(y_true, logits):
        per_example = loss_obj(y_true, logits)
        # Average over the GLOBAL batch, not the replica's share of it.
        return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = compute_loss(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_acc.update_state(y, logits)
        return loss

    @tf.function
    def train_step(x, y):
        per_replica = strategy.run(step_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dist_ds)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = next(iterator)
        loss = train_step(x, y)
        print(f"step={step} loss={float(loss):.6f} acc={float(train_acc.result()):.3f}")
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
