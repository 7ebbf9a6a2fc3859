"""`envprobe.describe()` plus the runtime settings `tfrepro env` states: the
precision policy, XLA auto-clustering, op determinism, TF32 (stdlib +
TensorFlow only, never imports tfrepro).

    python runtimeprobe.py OUT.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import devices  # noqa: E402  (the sibling files, loaded by path)
import envprobe  # noqa: E402


def _call(f):
    try:
        return f()
    except Exception as e:  # one setting that cannot be read never hides the others
        return f"unavailable: {type(e).__name__}"


def runtime(tf):
    """The settings a fresh process starts with (what a trial starts from)."""
    out = {}
    try:
        import keras

        out["precision_policy"] = _call(lambda: keras.mixed_precision.global_policy().name)
        out["floatx"] = _call(keras.backend.floatx)
    except Exception as e:
        out["precision_policy"] = f"unavailable: {type(e).__name__}"
    out["xla_jit"] = _call(lambda: tf.config.optimizer.get_jit() or "off")
    out["op_determinism"] = devices.tf_settings(tf)["op_determinism"]
    out["tensor_float_32"] = _call(lambda: tf.config.experimental.tensor_float_32_execution_enabled())
    return out


if __name__ == "__main__":
    envprobe.main(runtime)
