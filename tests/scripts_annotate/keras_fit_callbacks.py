"""Train a small regression model on tabular sensor data with Keras `fit`.

Usage:
    python keras_fit_callbacks.py [--epochs N] [--batch-size B] [--lr LR]

The real data lives in a parquet file; for this script we synthesise data of
the same shape. TRAIN_STEPS (env) caps the steps per epoch for quick runs.
"""

import argparse
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

# Learning rate the warm-up callback ramps up to.
WARMUP_TARGET_LR = 1e-3
NUM_FEATURES = 16


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default=None, help="where checkpoints and logs go")
    return parser.parse_args()


def make_data(n, seed):
    """Synthetic stand-in for the sensor table: y is a noisy linear function of x."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, NUM_FEATURES)).astype("float32")
    w = rng.normal(size=(NUM_FEATURES, 1)).astype("float32")
    y = (x @ w + 0.1 * rng.normal(size=(n, 1))).astype("float32")
    return x, y


def build_dataset(x, y, batch_size, training=True):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if training:
        # Fixed seed and no reshuffle: runs must be comparable.
        ds = ds.shuffle(len(x), seed=0, reshuffle_each_iteration=False)
    ds = ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return ds


def build_model():
    inputs = keras.Input(shape=(NUM_FEATURES,))
    x = keras.layers.Dense(64, activation="relu")(inputs)
    x = keras.layers.Dense(32, activation="relu")(x)
    outputs = keras.layers.Dense(1)(x)
    return keras.Model(inputs, outputs, name="sensor_regressor")


class WarmupScheduler(keras.callbacks.Callback):
    """Ramp the learning rate linearly from 0 to `target_lr` over `warmup_steps`."""

    def __init__(self, target_lr, warmup_steps=10):
        super().__init__()
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps
        self.step = 0

    def on_train_batch_begin(self, batch, logs=None):
        lr = self.target_lr * min(1.0, (self.step + 1) / self.warmup_steps)
        self.model.optimizer.learning_rate.assign(lr)
        self.step += 1


class LossHistory(keras.callbacks.Callback):
    """Keep the per-batch losses for the training report."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def main():
    args = parse_args()
    keras.utils.set_random_seed(args.seed)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="sensor-")
    steps = int(os.environ.get("TRAIN_STEPS", "0")) or None

    x, y = make_data(1024, args.seed)
    x_val, y_val = make_data(256, args.seed + 1)
    train_ds = build_dataset(x, y, args.batch_size)
    val_ds = build_dataset(x_val, y_val, args.batch_size, training=False)

    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=args.lr),
        loss="mse",
        metrics=["mae"],
    )

    history_cb = LossHistory()
    callbacks = [
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=3, restore_best_weights=False),
        keras.callbacks.ModelCheckpoint(
            os.path.join(out_dir, "best.weights.h5"),
            save_weights_only=True,
            save_best_only=True,
        ),
        WarmupScheduler(WARMUP_TARGET_LR, warmup_steps=5),
        history_cb,
    ]
    callbacks.append(keras.callbacks.CSVLogger(os.path.join(out_dir, "log.csv")))

    model.fit(
        train_ds,
        validation_data=val_ds,
        epochs=args.epochs,
        steps_per_epoch=steps,
        callbacks=callbacks,
        verbose=2,
    )
    print(f"final loss {history_cb.losses[-1]:.4f}" if history_cb.losses else "no training")


if __name__ == "__main__":
    main()
