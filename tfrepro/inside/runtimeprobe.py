"""`envprobe.describe()` plus the runtime settings `tfrepro env` states: the
precision policy (of the Keras `tf.keras` is), XLA auto-clustering, op
determinism, TF32 (stdlib + TensorFlow only, never imports tfrepro).

    python runtimeprobe.py OUT.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import devices  # noqa: E402  (the sibling files, loaded by path)
import envprobe  # noqa: E402


def _tf_keras(tf):
    """The Keras a script's `tf.keras` is, loaded: tf_keras where
    TF_USE_LEGACY_KERAS=1 asks for it, else Keras 3 (never a second one).
    `tf.keras` is a lazy loader: the first attribute read imports it, and
    raises where it cannot."""
    keras = tf.keras
    getattr(keras, "mixed_precision")
    return keras


def runtime(tf):
    """The settings a fresh process starts with (what a trial starts from)."""
    out = {"precision_policy": devices.read(lambda: devices.precision_policy(_tf_keras(tf)))}
    out["xla_jit"] = devices.read(lambda: tf.config.optimizer.get_jit() or "off")
    out["op_determinism"] = devices.tf_settings(tf)["op_determinism"]
    out["tensor_float_32"] = devices.read(lambda: tf.config.experimental.tensor_float_32_execution_enabled())
    return out


if __name__ == "__main__":
    envprobe.main(runtime)
