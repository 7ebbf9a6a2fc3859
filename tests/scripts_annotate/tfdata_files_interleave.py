"""Train on sharded TFRecord files read with tf.data.

The production input is ~200 shards on a bucket; here a few small shards of
synthetic records are written to a temporary directory first, with the same
feature spec.
"""

import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
FEATURE_DIM = 8
FEATURE_SPEC = {
    "x": tf.io.FixedLenFeature([FEATURE_DIM], tf.float32),
    "y": tf.io.FixedLenFeature([1], tf.float32),
}


def write_shards(directory, num_shards=4, per_shard=128, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(FEATURE_DIM, 1))
    for shard in range(num_shards):
        path = os.path.join(directory, f"train-{shard:05d}-of-{num_shards:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(per_shard):
                x = rng.normal(size=FEATURE_DIM)
                y = x @ w + 0.05 * rng.normal(size=1)
                example = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x.tolist())),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=y.tolist())),
                }))
                writer.write(example.SerializeToString())
    return os.path.join(directory, "train-*.tfrecord")


def parse_example(record):
    parsed = tf.io.parse_single_example(record, FEATURE_SPEC)
    return parsed["x"], parsed["y"]


def input_fn(pattern, batch_size):
    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    ds = (
        files.interleave(
            tf.data.TFRecordDataset,
            cycle_length=4,
            num_parallel_calls=AUTOTUNE,
            deterministic=True,
        )
        # decode in parallel; the order is kept
        .map(parse_example, num_parallel_calls=AUTOTUNE)
        .cache()
        .shuffle(512, seed=0, reshuffle_each_iteration=False)  # whole data set fits
        .batch(batch_size, drop_remainder=True)
        .repeat()
        .prefetch(AUTOTUNE)
    )
    return ds


def build_model():
    inputs = tf.keras.Input(shape=(FEATURE_DIM,))
    hidden = tf.keras.layers.Dense(32, activation="tanh")(inputs)
    outputs = tf.keras.layers.Dense(1)(hidden)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss="mse", jit_compile=True)
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "16")))
    args = parser.parse_args()

    tf.keras.utils.set_random_seed(0)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="shards-")
    pattern = write_shards(data_dir)
    model = build_model()
    model.fit(
        input_fn(pattern, args.batch_size),
        steps_per_epoch=args.steps,
        epochs=1,
        callbacks=[tf.keras.callbacks.TerminateOnNaN()],
        verbose=2,
    )


if __name__ == "__main__":
    main()
