"""`tfrepro check`'s probes: a harness plugin that records, never judges.

Runs INSIDE the trial process, loaded by path by the harness (stdlib + NumPy +
TensorFlow/Keras only, no tfrepro import). `install(ctx)` is called before the
script runs and before TensorFlow is imported; nothing here imports TensorFlow
early (the script may still set TF_* variables or logical devices): the patches
are applied by a post-import hook when the script imports `tensorflow`/`keras`.

What it records (each key ends up in `TrialResult.extra`):
- `check.batches`: the first two batches (shapes, dtypes, ranges, NaN/Inf),
  seen at `Model.fit` (its `x`/`y`) or, for custom loops, at the first
  `tf.data.Dataset` iterated eagerly; plus what the first weighted layer of the
  model receives (a weightless standardising layer in front counts);
- `check.loss`: the loss: the compiled one under `fit`, else the first Keras
  loss object / cross-entropy function called;
- `check.model`: the main model's parameter counts, output width, last activation;
- `check.timing`: the input pipeline alone (batches per second, in-graph) and
  the model's forward+backward on one in-memory batch, measured at the end so
  the training trial itself is not disturbed;
- `check.env`: versions, devices, build info, whether a GPU is expected;
- `check.skips`: why a probe could not apply; `check.errors`: probe failures.

Invariant: a probe never raises into the script; whatever goes wrong is
recorded as a reason, so the checklist can say "skipped" instead of failing
silently. Side effect worth knowing: peeking at a dataset's first batches
creates one extra iterator, which advances a reshuffling `shuffle` by one epoch.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import statistics
import sys
import time
import traceback

_NORMALISING = frozenset({
    "Normalization", "Rescaling", "BatchNormalization", "LayerNormalization",
    "GroupNormalization", "UnitNormalization", "RMSNormalization", "Discretization",
})
_LOSS_KINDS = {
    "sparse_categorical_crossentropy": "sparse",
    "sparsecategoricalcrossentropy": "sparse",
    "categorical_crossentropy": "categorical",
    "categoricalcrossentropy": "categorical",
    "binary_crossentropy": "binary",
    "binarycrossentropy": "binary",
    "sparse_softmax_cross_entropy_with_logits": "sparse",
    "softmax_cross_entropy_with_logits": "categorical",
    "sigmoid_cross_entropy_with_logits": "binary",
}
_TF_ENV_PREFIXES = ("TF_CPP_", "TF_ENABLE_", "TF_XLA_", "TF_GPU_", "TF_FORCE_", "TF_CUDNN_", "TF_DETERMINISTIC",
                    "TF_NUM_", "TF_DISABLE_", "TF_ONEDNN", "TF_MKL", "TF_USE_LEGACY_KERAS")
_TF_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "XLA_FLAGS", "KERAS_BACKEND", "KERAS_HOME")
_PIPELINE_BUDGET_S = 1.5
_COMPUTE_BUDGET_S = 0.6


class _Probes:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.options = dict(getattr(ctx, "options", {}) or {})
        self.busy = False  # our own dataset iteration must not re-enter the peek
        self.captured = False
        self.dataset = None  # the tf.data pipeline feeding training, for timing
        self.first_x = None
        self.loss = None
        self.skips: dict[str, str] = {}
        self.errors: list[str] = []
        self.fit_seen = False
        self.fit_model = None

    # -- plumbing -------------------------------------------------------------

    def _guard(self, where: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            line = traceback.format_exc(limit=2).strip().splitlines()[-1]
            self.errors.append(f"{where}: {line}")
            self.ctx.record("check.errors", self.errors)

    def _skip(self, probe: str, reason: str) -> None:
        self.skips.setdefault(probe, reason)
        self.ctx.record("check.skips", self.skips)

    # -- post-import patches --------------------------------------------------

    def on_tensorflow(self, tf) -> None:
        probes = self
        orig_iter = tf.data.Dataset.__iter__

        def __iter__(ds):
            if not probes.busy and not probes.captured and tf.executing_eagerly():
                probes._guard("dataset peek", probes._capture_dataset, ds, "iter")
            return orig_iter(ds)

        tf.data.Dataset.__iter__ = __iter__
        self._orig_iter = orig_iter
        for name in ("sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
                     "sigmoid_cross_entropy_with_logits"):
            self._wrap_loss_fn(tf.nn, name, from_logits=True)

    def on_keras(self, keras_module) -> None:
        losses = getattr(keras_module, "losses", None)
        if losses is None:
            return
        self._wrap_loss_class(losses.Loss)
        for name in ("sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy"):
            self._wrap_loss_fn(losses, name, from_logits=None)

    def _wrap_loss_class(self, cls) -> None:
        if getattr(cls, "_tfrepro_probe", False):
            return
        orig = cls.__call__
        probes = self

        def __call__(loss_self, *args, **kwargs):
            if probes.loss is None:
                probes._guard("loss probe", probes._note_loss_object, loss_self, "call")
            return orig(loss_self, *args, **kwargs)

        cls.__call__ = __call__
        cls._tfrepro_probe = True

    def _wrap_loss_fn(self, module, name: str, *, from_logits) -> None:
        orig = getattr(module, name, None)
        if orig is None or getattr(orig, "_tfrepro_probe", False):
            return
        probes = self

        def wrapper(*args, **kwargs):
            if probes.loss is None:
                logits = from_logits if from_logits is not None else bool(kwargs.get("from_logits", False))
                probes._set_loss({"name": name, "kind": _LOSS_KINDS[name], "from_logits": logits,
                                  "source": "call"})
            return orig(*args, **kwargs)

        wrapper._tfrepro_probe = True
        wrapper.__wrapped__ = orig
        wrapper.__name__ = name
        setattr(module, name, wrapper)

    # -- loss -------------------------------------------------------------------

    def _set_loss(self, info: dict) -> None:
        self.loss = info
        self.ctx.record("check.loss", info)

    def _note_loss_object(self, loss, source: str) -> None:
        if isinstance(loss, str):
            key = loss.lower()
            self._set_loss({"name": loss, "kind": _LOSS_KINDS.get(key, "other"),
                            "from_logits": False, "source": source})
            return
        if isinstance(loss, (dict, list, tuple)):
            self._set_loss({"name": type(loss).__name__, "kind": "multi", "from_logits": None,
                            "source": source})
            return
        name = getattr(loss, "__name__", None) or type(loss).__name__
        kind = _LOSS_KINDS.get(name.lower(), "other")
        logits = None
        try:
            logits = loss.get_config().get("from_logits")
        except Exception:
            fn_kwargs = getattr(loss, "_fn_kwargs", None) or {}
            logits = fn_kwargs.get("from_logits")
        if kind == "other":  # a LossFunctionWrapper around a cross-entropy function
            fn = getattr(loss, "fn", None)
            kind = _LOSS_KINDS.get(getattr(fn, "__name__", "").lower(), "other")
        self._set_loss({"name": name, "kind": kind,
                        "from_logits": bool(logits) if logits is not None else (False if kind != "other" else None),
                        "source": source})

    # -- first batches ----------------------------------------------------------

    def on_fit(self, model, args, kwargs) -> None:
        if self.fit_seen:
            return
        self.fit_seen = True
        self.fit_model = model
        loss = getattr(model, "loss", None)
        if loss is not None:
            self._guard("compiled loss", self._note_loss_object, loss, "compile")
        self._guard("fit data", self._on_fit_data, args, kwargs)
        # No forward pass here: it would build an unbuilt model before fit does.
        self._guard("model (fit)", self._record_model, model, False)

    def _on_fit_data(self, args, kwargs) -> None:
        x = kwargs.get("x", args[0] if args else None)
        y = kwargs.get("y", args[1] if len(args) > 1 else None)
        batch_size = kwargs.get("batch_size", args[2] if len(args) > 2 else None) or 32
        import tensorflow as tf

        if isinstance(x, tf.data.Dataset):
            self._capture_dataset(x, "fit")
        elif x is not None and _is_array(x):
            self.captured = True
            elements = []
            for i in range(2):
                sl = slice(i * batch_size, (i + 1) * batch_size)
                xs = _map(lambda a: a[sl], x)
                ys = _map(lambda a: a[sl], y) if y is not None else None
                if _first_dim(xs) == 0:
                    break
                elements.append((xs, ys) if ys is not None else (xs,))
            self._record_batches(elements, "fit (arrays)")
            self._skip("timing", "fit was given in-memory arrays: Keras slices them itself, "
                                 "there is no tf.data pipeline to time")
        else:
            self.captured = True
            kind = type(x).__name__
            self._skip("batches", f"fit was given a {kind}; only tf.data datasets and arrays are inspected")
            self._skip("timing", f"fit was given a {kind}; only tf.data pipelines are timed")

    def _capture_dataset(self, ds, source: str) -> None:
        self.captured = True
        self.dataset = ds
        self.busy = True
        try:
            it = self._orig_iter(ds.take(2)) if hasattr(self, "_orig_iter") else iter(ds.take(2))
            elements = [el for el in it]
        finally:
            self.busy = False
        self._record_batches(elements, "fit (tf.data)" if source == "fit" else "first dataset iterated")

    def _record_batches(self, elements, source: str) -> None:
        import numpy as np

        batches = []
        elements = [_split_element(el) for el in elements]
        for el in elements:
            parts = {"inputs": el[0], "labels": el[1] if len(el) > 1 else None}
            batch = {}
            for role, value in parts.items():
                if value is None:
                    batch[role] = []
                    continue
                batch[role] = [_tensor_stats(path, leaf, np) for path, leaf in _leaves(value, role)]
            batches.append(batch)
        if elements:
            self.first_x = elements[0][0]
        self.ctx.record("check.batches", {"source": source, "batches": batches})

    # -- model ----------------------------------------------------------------

    def _record_model(self, model, call: bool = True) -> None:
        import numpy as np

        info = {"name": getattr(model, "name", type(model).__name__), "class": type(model).__name__}
        try:
            info["trainable"] = int(sum(int(np.prod(v.shape)) for v in model.trainable_weights))
            info["non_trainable"] = int(sum(int(np.prod(v.shape)) for v in model.non_trainable_weights))
            info["built"] = bool(getattr(model, "built", True))
        except Exception:
            pass
        width = None
        try:
            outs = model.outputs
            if outs:
                width = outs[0].shape[-1]
        except Exception:
            pass
        if width is None and call and self.first_x is not None:
            try:
                out = model(self.first_x, training=False)
                first = out[0] if isinstance(out, (list, tuple)) else out
                width = first.shape[-1]
            except Exception:
                pass
        info["output_width"] = int(width) if width is not None else None
        info["last_activation"] = _last_activation(model)
        eff = None
        if call and self.first_x is not None:
            try:
                eff = _first_weighted_input(model, self.first_x, np)
            except Exception:
                eff = None
        info["first_layer_input"] = eff
        self.ctx.record("check.model", info)

    # -- end ------------------------------------------------------------------

    def on_end(self, models) -> None:
        self._guard("environment", self._record_env)
        if not models:
            self._skip("model", "no Keras model was created during the trial")
        else:
            main = self._main_model(models)
            if main is not None:
                self._guard("model", self._record_model, main)
        if not self.captured:
            self._skip("batches", "no batch was seen: fit got no data, or the loop iterated no "
                                  "tf.data.Dataset eagerly (a dataset iterated inside tf.function, "
                                  "or arrays sliced by hand, are not seen)")
        self._guard("timing", self._record_timing, models)

    def _main_model(self, models):
        """The model that trains: the one fit ran on, else the largest built one."""
        if self.fit_model is not None:
            return self.fit_model
        best, best_n = None, -1
        for m in models:
            try:
                n = sum(int(v.shape.num_elements() if hasattr(v.shape, "num_elements") else _prod(v.shape))
                        for v in m.trainable_weights)
            except Exception:
                continue
            if n > best_n:
                best, best_n = m, n
        return best

    def _record_timing(self, models) -> None:
        if "timing" in self.skips:
            return
        if self.dataset is None:
            self._skip("timing", "no tf.data pipeline fed the training (nothing to time)")
            return
        import numpy as np
        import tensorflow as tf

        timing: dict = {}
        self.busy = True
        try:
            timing.update(_time_pipeline(self.dataset, tf, np))
        finally:
            self.busy = False
        main = self._main_model(models) if models else None
        if main is not None and self.first_x is not None:
            try:
                timing.update(_time_compute(main, self.first_x, tf))
            except Exception:
                line = traceback.format_exc(limit=1).strip().splitlines()[-1]
                timing["compute_error"] = line
        self.ctx.record("check.timing", timing)

    def _record_env(self) -> None:
        env = {"python": platform.python_version(), "platform": platform.platform(),
               "executable": sys.executable}
        tf = sys.modules.get("tensorflow")
        if tf is not None:
            env["tensorflow"] = getattr(tf, "__version__", None)
            for lib in ("keras", "tf_keras"):
                mod = sys.modules.get(lib)
                if mod is not None and getattr(mod, "__version__", None):
                    env[lib] = mod.__version__
            try:
                info = tf.sysconfig.get_build_info()
                env["build"] = {k: (v if isinstance(v, (bool, int, float, str)) or v is None else str(v))
                                for k, v in dict(info).items()}
            except Exception:
                env["build"] = {}
            devices: dict[str, int] = {}
            for d in tf.config.list_physical_devices():
                devices[d.device_type] = devices.get(d.device_type, 0) + 1
            env["physical_devices"] = devices
            names = []
            for d in tf.config.list_physical_devices("GPU"):
                try:
                    names.append(tf.config.experimental.get_device_details(d).get("device_name") or d.name)
                except Exception:
                    names.append(d.name)
            env["gpu_names"] = names
            try:
                logical: dict[str, int] = {}
                for d in tf.config.list_logical_devices():
                    logical[d.device_type] = logical.get(d.device_type, 0) + 1
                env["logical_devices"] = logical
            except Exception:
                pass
        # An allow-list: other tools use TF_* too (Terraform keeps tokens in TF_TOKEN_*).
        env["tf_env"] = {k: v for k, v in os.environ.items()
                         if k.startswith(_TF_ENV_PREFIXES) or k in _TF_ENV_NAMES}
        expected, why = _gpu_expected(self.options.get("expect_gpu"))
        env["gpu_expected"] = expected
        env["gpu_expected_why"] = why
        self.ctx.record("check.env", env)


# -- helpers (pure, NumPy passed in) ----------------------------------------------


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _is_array(x) -> bool:
    if isinstance(x, dict):
        return all(_is_array(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return bool(x) and all(_is_array(v) for v in x)
    return hasattr(x, "shape") and hasattr(x, "dtype")


_LABEL_KEYS = ("y", "label", "labels", "target", "targets")


def _split_element(el) -> tuple:
    """(inputs, labels[, weights]) the way Keras reads a dataset element; a
    dict with a label-like key ("label", "y", ...) is split on it, as custom
    loops usually do."""
    if isinstance(el, tuple) or (isinstance(el, list) and 1 <= len(el) <= 3):
        return tuple(el)
    if isinstance(el, dict):
        keys = [k for k in el if str(k).lower() in _LABEL_KEYS]
        if len(keys) == 1:
            rest = {k: v for k, v in el.items() if k != keys[0]}
            inputs = next(iter(rest.values())) if len(rest) == 1 else rest
            return (inputs, el[keys[0]])
    return (el,)


def _map(fn, x):
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map(fn, v) for v in x)
    return fn(x)


def _first_dim(x) -> int:
    for _, leaf in _leaves(x, ""):
        return int(leaf.shape[0]) if len(leaf.shape) else 1
    return 0


def _leaves(x, prefix: str):
    if isinstance(x, dict):
        for k in sorted(x, key=str):
            yield from _leaves(x[k], f"{prefix}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, x


def _finite_or_none(v: float):
    return float(v) if math.isfinite(v) else None


def _tensor_stats(name: str, value, np) -> dict:
    """Shape, dtype and value statistics of one tensor; never raises."""
    d: dict = {"name": name}
    try:
        a = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        a = np.asarray(a)
    except Exception as e:  # ragged, sparse, strings of odd kinds
        d.update({"dtype": str(getattr(value, "dtype", type(value).__name__)), "kind": "other",
                  "note": f"not inspected: {type(e).__name__}"})
        return d
    d["shape"] = [int(s) for s in a.shape]
    d["dtype"] = str(a.dtype)
    d["size"] = int(a.size)
    kind = a.dtype.kind
    if kind == "b":
        d["kind"] = "bool"
        return d
    if kind in "iu":
        d["kind"] = "int"
        if a.size:
            d.update({"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
                      "std": float(a.std()), "integral": True})
        return d
    if kind == "V" or kind == "f" or kind == "c":
        try:
            a = a.astype(np.float64) if kind != "c" else np.abs(a)
        except Exception:
            d["kind"] = "other"
            return d
        d["kind"] = "float"
        finite = np.isfinite(a)
        d["nan"] = int(np.isnan(a).sum())
        d["inf"] = int(np.isinf(a).sum())
        good = a[finite]
        if good.size:
            d.update({"min": float(good.min()), "max": float(good.max()), "mean": float(good.mean()),
                      "std": float(good.std()),
                      "integral": bool(np.all(np.equal(np.floor(good), good)))})
            if a.ndim >= 1 and a.shape[-1] >= 2 and good.size == a.size:
                rows = a.reshape(-1, a.shape[-1]).sum(axis=1)
                d["row_sum_min"] = float(rows.min())
                d["row_sum_max"] = float(rows.max())
        return d
    d["kind"] = "other"
    return d


def _last_activation(model):
    try:
        layers = model.layers
    except Exception:
        return None
    if not layers:
        return None
    last = layers[-1]
    cls = type(last).__name__
    if cls == "Softmax":
        return "softmax"
    act = getattr(last, "activation", None)
    name = getattr(act, "__name__", None)
    if name is None and act is not None:
        name = str(act)
    return name


def _first_weighted_input(model, x, np):
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
        if cls in _NORMALISING:
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
    stats = _tensor_stats("", h, np)
    return {"layer": target.name, "via": prefix, "stats": stats}


def _time_pipeline(ds, tf, np) -> dict:
    """Seconds per batch of the pipeline alone: each batch is stamped in-graph
    (`tf.timestamp` in a map after it) as it comes out, so iterator start-up
    (buffers filling) and Python overhead stay out. The first half of the gaps
    is dropped: a `prefetch` buffer filled during start-up would hide the
    steady rate. The least disturbed of up to three runs counts (other
    processes on the machine only ever add time). Bounded in time."""
    def stamps(k: int) -> tuple[list[float], float]:
        t = time.perf_counter()
        s = _nondeterministic(lambda: ds.take(k).map(lambda *_: tf.timestamp()).batch(k).get_single_element())
        return [float(v) for v in np.asarray(s)], time.perf_counter() - t

    first, startup = stamps(3)
    gaps = [b - a for a, b in zip(first, first[1:])]
    if not gaps:
        return {"pipeline_error": f"the dataset yielded {len(first)} batch(es); at least 2 are needed"}
    estimate = max(statistics.mean(gaps), 1e-6)
    n = int(max(4, min(40, _PIPELINE_BUDGET_S / 3 / estimate)))
    # The least disturbed of up to three runs: other processes only ever add time.
    runs, batches = [], 0
    deadline = time.perf_counter() + _PIPELINE_BUDGET_S
    for _ in range(3):
        s, wall = stamps(1 + n)
        batches += len(s)
        steady = [b - a for a, b in zip(s, s[1:])][(len(s) - 1) // 2:]
        if steady:
            runs.append(statistics.median(steady))
        if time.perf_counter() > deadline:
            break
    if not runs:
        runs = [statistics.median(gaps)]
    return {"pipeline_s": min(runs), "pipeline_runs": [round(r, 7) for r in runs],
            "pipeline_batches": batches, "pipeline_startup_s": startup,
            "pipeline_method": "in-graph timestamps between consecutive batches "
                               "(median of the steady half, least disturbed run)"}


def _nondeterministic(fn):
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


def _time_compute(model, x, tf) -> dict:
    """Seconds of the model's forward+backward on one in-memory batch (no
    optimizer update, inference-mode layers: the weights and statistics stay
    as the trial left them)."""
    variables = list(model.trainable_variables)

    @tf.function
    def step(inputs):
        with tf.GradientTape() as tape:
            out = model(inputs, training=False)
            total = tf.add_n([tf.reduce_mean(tf.cast(o, tf.float32)) for o in tf.nest.flatten(out)])
        return tape.gradient(total, variables) if variables else total

    step(x)  # trace
    runs = []
    deadline = time.perf_counter() + _COMPUTE_BUDGET_S
    for _ in range(3):
        times = []
        for _ in range(7):
            t = time.perf_counter()
            step(x)
            times.append(time.perf_counter() - t)
        runs.append(statistics.median(times))
        if time.perf_counter() > deadline:
            break
    return {"compute_s": min(runs), "compute_runs": [round(r, 7) for r in runs],
            "compute_method": "forward+backward of the model on one in-memory batch "
                              "(median of 7 calls, least disturbed run)"}


def _gpu_expected(option) -> tuple[bool, str | None]:
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


# -- post-import hook ------------------------------------------------------------


class _HookLoader:
    def __init__(self, loader, hook) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _AfterImport:
    """Calls a hook right after a watched top-level module finishes importing."""

    def __init__(self, hooks: dict) -> None:
        self._hooks = dict(hooks)

    def find_spec(self, fullname, path=None, target=None):
        hook = self._hooks.pop(fullname, None)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookLoader(spec.loader, hook)
                return spec
        return None


def install(ctx) -> None:
    """The harness's plugin entry point (see harness.py)."""
    probes = _Probes(ctx)

    def guarded(name, fn):
        return lambda module: probes._guard(name, fn, module)

    hooks = {"tensorflow": guarded("tensorflow patches", probes.on_tensorflow),
             "keras": guarded("keras patches", probes.on_keras),
             "tf_keras": guarded("tf_keras patches", probes.on_keras)}
    for name in list(hooks):
        if name in sys.modules:  # imported already (not the case under the harness)
            hooks.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(hooks))
    ctx.add_fit_hook(lambda model, args, kwargs: probes._guard("fit probe", probes.on_fit, model, args, kwargs))
    ctx.add_end_hook(lambda models: probes._guard("end probe", probes.on_end, models))
