"""Measurement helpers of `tfrepro check`'s probes (tensor statistics,
dataset elements, model walking, timing, GPU expectation).

Loaded by path by `probes.py` inside the trial process: stdlib only at import
time; NumPy / TensorFlow are passed in or imported inside the functions that
need them. Never imports tfrepro. The statistics are pure and tested with
NumPy alone.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time

NORMALISING = frozenset(
    {
        "Normalization",
        "Rescaling",
        "BatchNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "UnitNormalization",
        "RMSNormalization",
        "Discretization",
    }
)
PIPELINE_BUDGET_S = 1.5
COMPUTE_BUDGET_S = 0.6


def is_array(x) -> bool:
    if isinstance(x, dict):
        return all(is_array(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return bool(x) and all(is_array(v) for v in x)
    return hasattr(x, "shape") and hasattr(x, "dtype")


LABEL_KEYS = ("y", "label", "labels", "target", "targets")


def split_element(el) -> tuple:
    """(inputs, labels[, weights]) the way Keras reads a dataset element; a
    dict with a label-like key ("label", "y", ...) is split on it, as custom
    loops usually do."""
    if isinstance(el, tuple) or (isinstance(el, list) and 1 <= len(el) <= 3):
        return tuple(el)
    if isinstance(el, dict):
        keys = [k for k in el if str(k).lower() in LABEL_KEYS]
        if len(keys) == 1:
            rest = {k: v for k, v in el.items() if k != keys[0]}
            inputs = next(iter(rest.values())) if len(rest) == 1 else rest
            return (inputs, el[keys[0]])
    return (el,)


def _moments(a, integral: bool) -> dict:
    return {**{k: float(getattr(a, k)()) for k in ("min", "max", "mean", "std")}, "integral": integral}


def tensor_stats(name: str, value, np) -> dict:
    """Shape, dtype and value statistics of one tensor; never raises."""
    d: dict = {"name": name}
    try:
        a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception as e:  # ragged, sparse, strings of odd kinds
        dtype = str(getattr(value, "dtype", type(value).__name__))
        return {**d, "dtype": dtype, "kind": "other", "note": f"not inspected: {type(e).__name__}"}
    d.update(shape=[int(s) for s in a.shape], dtype=str(a.dtype), size=int(a.size))
    kind = a.dtype.kind
    d["kind"] = {"b": "bool", "i": "int", "u": "int"}.get(kind, "other")
    if kind in "iu" and a.size:
        d.update(_moments(a, True))
    if kind not in "Vfc":
        return d
    try:
        a = a.astype(np.float64) if kind != "c" else np.abs(a)
    except Exception:
        return d  # a void dtype that is no number: "other"
    d.update(kind="float", nan=int(np.isnan(a).sum()), inf=int(np.isinf(a).sum()))
    good = a[np.isfinite(a)]
    if good.size:
        d.update(_moments(good, bool(np.all(np.equal(np.floor(good), good)))))
        if a.ndim >= 1 and a.shape[-1] >= 2 and good.size == a.size:
            rows = a.reshape(-1, a.shape[-1]).sum(axis=1)
            d.update(row_sum_min=float(rows.min()), row_sum_max=float(rows.max()))
    return d


def last_activation(model):
    try:
        layers = model.layers
    except Exception:
        return None
    if not layers:
        return None
    if type(layers[-1]).__name__ == "Softmax":
        return "softmax"
    act = getattr(layers[-1], "activation", None)
    name = getattr(act, "__name__", None)
    return str(act) if name is None and act is not None else name


def first_weighted_input(model, x, np):
    """What the first layer with weights receives, walking weightless layers
    (a hand-written standardiser counts). A known normalising layer on the
    way answers by its name. None when the model cannot be walked."""
    layers = list(getattr(model, "layers", []) or [])
    if not layers:
        return None
    prefix = []
    target = None
    for layer in layers:
        cls = type(layer).__name__
        if cls == "InputLayer":
            continue
        if cls in NORMALISING:
            return {"layer": layer.name, "normalised_by": cls, "via": prefix}
        if layer.weights:
            target = layer
            break
        prefix.append(layer.name)
    if target is None or not prefix:
        return None  # the first weighted layer sees the raw inputs
    lib = sys.modules.get("tf_keras") if type(model).__module__.startswith("tf_keras") else None
    if lib is None:
        import keras as lib

    if isinstance(model, lib.Sequential):
        h = x
        for layer in layers:
            if layer is target:
                break
            if type(layer).__name__ != "InputLayer":
                h = layer(h)
    else:
        h = lib.Model(model.inputs, target.input)(x)
    stats = tensor_stats("", h, np)
    return {"layer": target.name, "via": prefix, "stats": stats}


def time_pipeline(ds, tf, np) -> dict:
    """Seconds per batch of the pipeline alone: each batch is stamped in-graph
    (`tf.timestamp` in a map after it) as it comes out, so iterator start-up
    (buffers filling) and Python overhead stay out. The first half of the gaps
    is dropped: a `prefetch` buffer filled during start-up would hide the
    steady rate. The least disturbed of up to three runs counts (other
    processes on the machine only ever add time). Bounded in time."""
    # Not converted by AutoGraph: there is nothing to convert, and a module
    # loaded by path makes it warn.
    stamp = tf.autograph.experimental.do_not_convert(lambda *_: tf.timestamp())

    def stamps(k: int) -> tuple[list[float], float]:
        t = time.perf_counter()
        s = nondeterministic(lambda: ds.take(k).map(stamp).batch(k).get_single_element())
        return [float(v) for v in np.asarray(s)], time.perf_counter() - t

    first, startup = stamps(3)
    gaps = [b - a for a, b in zip(first, first[1:])]
    if not gaps:
        return {"pipeline_error": f"the dataset yielded {len(first)} batch(es); at least 2 are needed"}
    estimate = max(statistics.mean(gaps), 1e-6)
    n = int(max(4, min(40, PIPELINE_BUDGET_S / 3 / estimate)))
    # The least disturbed of up to three runs: other processes only ever add time.
    runs, batches = [], 0
    deadline = time.perf_counter() + PIPELINE_BUDGET_S
    for _ in range(3):
        s, wall = stamps(1 + n)
        batches += len(s)
        steady = [b - a for a, b in zip(s, s[1:])][(len(s) - 1) // 2 :]
        if steady:
            runs.append(statistics.median(steady))
        if time.perf_counter() > deadline:
            break
    if not runs:
        runs = [statistics.median(gaps)]
    return {
        "pipeline_s": min(runs),
        "pipeline_runs": [round(r, 7) for r in runs],
        "pipeline_batches": batches,
        "pipeline_startup_s": startup,
        "pipeline_method": "in-graph timestamps between consecutive batches "
        "(median of the steady half, least disturbed run)",
    }


def nondeterministic(fn):
    """Runs fn with op determinism off: `tf.timestamp` refuses to run under it,
    and the trial is over by the time anything is timed."""
    try:
        from tensorflow.python.framework import config

        was = config.is_op_determinism_enabled()
    except Exception:
        return fn()
    if was:
        config.disable_op_determinism()
    try:
        return fn()
    finally:
        if was:
            config.enable_op_determinism()


def time_compute(model, x, tf) -> dict:
    """Seconds of the model's forward+backward on one in-memory batch (no
    optimizer update, inference-mode layers: the weights and statistics stay
    as the trial left them)."""
    variables = list(model.trainable_variables)

    @tf.function(autograph=False)
    def step(inputs):
        with tf.GradientTape() as tape:
            out = model(inputs, training=False)
            total = tf.add_n([tf.reduce_mean(tf.cast(o, tf.float32)) for o in tf.nest.flatten(out)])
        return tape.gradient(total, variables) if variables else total

    step(x)  # trace
    runs = []
    deadline = time.perf_counter() + COMPUTE_BUDGET_S
    for _ in range(3):
        times = []
        for _ in range(7):
            t = time.perf_counter()
            step(x)
            times.append(time.perf_counter() - t)
        runs.append(statistics.median(times))
        if time.perf_counter() > deadline:
            break
    return {
        "compute_s": min(runs),
        "compute_runs": [round(r, 7) for r in runs],
        "compute_method": "forward+backward of the model on one in-memory batch "
        "(median of 7 calls, least disturbed run)",
    }


def gpu_expected(option) -> tuple[bool, str | None]:
    if option is not None:
        return bool(option), "requested (--expect-gpu)" if option else None
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() not in ("", "-1"):
        return True, f"CUDA_VISIBLE_DEVICES={cvd}"
    if os.path.exists("/dev/nvidia0"):
        return True, "/dev/nvidia0 exists"
    if shutil.which("nvidia-smi"):
        return True, "nvidia-smi is installed"
    return False, None
