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
import dataclasses
import json
import logging
import os
import tempfile
import time

import numpy as np
import tensorflow as tf
import keras

NUM_CLASSES = 4
NUM_FEATURES = 12
NUM_REPLICAS = 2

log = logging.getLogger("train")


@dataclasses.dataclass
class TrainConfig:
    """Everything a run depends on; saved next to the checkpoints."""

    steps: int = 20
    per_replica_batch: int = 16
    lr: float = 1e-2
    seed: int = 0
    clip_norm: float = 5.0
    eval_batches: int = 2
    checkpoint_every: int = 0  # 0: only at the end
    out_dir: str = ""
    debug: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "TrainConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in fields})

    def save(self, directory: str) -> None:
        with open(os.path.join(directory, "config.json"), "w") as fh:
            json.dump(dataclasses.asdict(self), fh, indent=2)


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
class ResidualBlock(keras.layers.Layer):
    """x + f(x): two dense layers with a skip connection (width preserved)."""

    def __init__(self, width: int, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.inner = keras.layers.Dense(width, activation="relu")
        self.outer = keras.layers.Dense(width)

    def call(self, x, training=False):
        return x + self.outer(self.inner(x))

    def get_config(self):
        return {**super().get_config(), "width": self.width}


def build_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(NUM_FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            ResidualBlock(32),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )


def evaluate(model, dataset, batches: int) -> float:
    """Accuracy on a few batches of held-out data (single device is enough)."""
    acc = keras.metrics.SparseCategoricalAccuracy()
    for x, y in dataset.take(batches):
        acc.update_state(y, model(x, training=False))
    return float(acc.result())


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
    p.add_argument("--clip-norm", type=float, default=5.0)
    p.add_argument("--eval-batches", type=int, default=2)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--out-dir", default="")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    config = TrainConfig.from_args(args)
    config.out_dir = config.out_dir or tempfile.mkdtemp(prefix="loop-")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
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
        grads, _ = tf.clip_by_global_norm(grads, args.clip_norm)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_acc.update_state(y, logits)
        return loss

    @tf.function
    def train_step(x, y):
        per_replica = strategy.run(step_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(config.out_dir, "ckpt"), max_to_keep=2)
    config.save(config.out_dir)

    iterator = iter(dist_ds)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = next(iterator)
        loss = train_step(x, y)
        value = float(loss)
        print(f"step={step} loss={value:.6f} acc={float(train_acc.result()):.3f}")
        if not np.isfinite(value):
            log.error("non-finite loss at step %d; stopping", step)
            break
        if config.checkpoint_every and step % config.checkpoint_every == 0:
            manager.save(checkpoint_number=step)
    elapsed = time.perf_counter() - start
    log.info("trained %d steps in %.1fs", args.steps, elapsed)

    held_out = make_dataset(*synthetic_examples(256, args.seed + 1), global_batch)
    log.info("held-out accuracy %.3f", evaluate(model, held_out, config.eval_batches))
    manager.save(checkpoint_number=args.steps)


if __name__ == "__main__":
    main()
