"""`tfrepro check`'s probes: a harness plugin that records, never judges.

Runs INSIDE the trial process, loaded by path by the harness (stdlib + NumPy +
TensorFlow/Keras only, no tfrepro import). `install(ctx)` is called before the
script runs and before TensorFlow is imported; nothing here imports TensorFlow
early (the script may still set TF_* variables or logical devices): the patches
are applied by a post-import hook when the script imports `tensorflow`/`keras`.

What it records (each key ends up in `TrialResult.extra`):
- `check.batches`: the first two batches (shapes, dtypes, ranges, NaN/Inf),
  seen at `Model.fit` (its `x`/`y`) or, for custom loops, at the first
  `tf.data.Dataset` the script iterates eagerly (or hands to
  `experimental_distribute_dataset`); plus what the first weighted layer of
  the model receives (a weightless standardising layer in front counts);
- `check.loss`: the loss: the compiled one under `fit`, else the first Keras
  loss object / cross-entropy function called;
- `check.model`: the main model's parameter counts, output width, last activation;
- `check.timing`: the input pipeline alone (seconds per batch, in-graph) and
  the model's forward+backward on one in-memory batch, measured at the end so
  the training trial itself is not disturbed;
- `check.env`: versions, devices, build info, whether a GPU is expected;
- `check.skips`: why a probe could not apply; `check.errors`: probe failures.

The measuring helpers (statistics, timing, model walking) are in the sibling
`probe_tools.py`, loaded by path as well.

Invariant: a probe never raises into the script; whatever goes wrong is
recorded as a reason, so the checklist can say "skipped" instead of failing
silently. Side effect worth knowing: peeking at a dataset's first batches
creates one extra iterator, which advances a reshuffling `shuffle` by one epoch.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import sys
import traceback
from collections import Counter

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
_TF_ENV_PREFIXES = (
    "TF_CPP_",
    "TF_ENABLE_",
    "TF_XLA_",
    "TF_GPU_",
    "TF_FORCE_",
    "TF_CUDNN_",
    "TF_DETERMINISTIC",
    "TF_NUM_",
    "TF_DISABLE_",
    "TF_ONEDNN",
    "TF_MKL",
    "TF_USE_LEGACY_KERAS",
)
_TF_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "XLA_FLAGS", "KERAS_BACKEND", "KERAS_HOME")


# The harness that loads this plugin, and the sibling helper module it loads by
# path as `_tfrepro_probe_tools` (in sys.modules: AutoGraph and pickling look
# functions up by module).
H = sys.modules["_tfrepro_harness"]
T = H._sibling_file("probe_tools")
D = H._side("data")  # harness_data.py: the walk over a batch's leaves


class _Probes:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.busy = False  # our own dataset iteration must not re-enter the peek
        self.captured = False
        self.dataset = None  # the tf.data pipeline feeding training, for timing
        self.first_x = None
        self.loss = None
        self.skips: dict[str, str] = {}
        self.errors: list[str] = []
        self.fit_model = None  # the model of the first fit

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

        # Only datasets the script iterates itself are peeked at: the ones
        # TensorFlow iterates internally (per-device datasets of a distributed
        # iterator) must not get a second consumer, which deadlocks them.
        def __iter__(ds):
            if not probes.busy and not probes.captured and tf.executing_eagerly():
                probes._guard("late loss patches", probes.patch_losses_late)
                caller = sys._getframe(1).f_code.co_filename  # harness_data.py: not a library's, not ours
                if not H.FRAMES.is_library(caller):
                    probes._guard("dataset peek", probes._capture_dataset, ds, "iter")
            return orig_iter(ds)

        tf.data.Dataset.__iter__ = __iter__
        strategy = getattr(getattr(tf, "distribute", None), "Strategy", None)
        orig_distribute = getattr(strategy, "experimental_distribute_dataset", None)
        if orig_distribute is not None:

            def experimental_distribute_dataset(strategy_self, dataset, *args, **kwargs):
                # A custom loop under a strategy: peek at the global dataset
                # before it is split across replicas.
                if not probes.captured and isinstance(dataset, tf.data.Dataset) and tf.executing_eagerly():
                    probes._guard("dataset peek", probes._capture_dataset, dataset, "distributed dataset")
                return orig_distribute(strategy_self, dataset, *args, **kwargs)

            strategy.experimental_distribute_dataset = experimental_distribute_dataset
        for name in [n for n in _LOSS_KINDS if n.endswith("_with_logits")]:  # tf.nn's
            self._wrap_loss_fn(tf.nn, name, from_logits=True)

    def on_keras(self, keras_module) -> None:
        losses = getattr(keras_module, "losses", None)
        if losses is not None:
            self._patch_losses(losses)

    def patch_losses_late(self) -> None:
        """tf_keras imported from inside `import tensorflow` (TF_USE_LEGACY_KERAS)
        has no `losses` yet when its import hook runs; by the first dataset
        iteration or fit it has. Idempotent."""
        import importlib

        for name in [n for n in ("keras", "tf_keras") if n in sys.modules]:
            try:
                losses = getattr(sys.modules[name], "losses", None) or importlib.import_module(f"{name}.losses")
            except Exception:
                continue
            self._patch_losses(losses)

    def _patch_losses(self, losses) -> None:
        self._wrap_loss(losses.Loss, "__call__", lambda args, kwargs: self._note_loss_object(args[0], "call"))
        for name in ("sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy"):
            self._wrap_loss_fn(losses, name, from_logits=None)

    def _wrap_loss_fn(self, module, name: str, *, from_logits) -> None:
        def note(args, kwargs):
            logits = from_logits if from_logits is not None else bool(kwargs.get("from_logits", False))
            self._set_loss({"name": name, "kind": _LOSS_KINDS[name], "from_logits": logits, "source": "call"})

        self._wrap_loss(module, name, note)

    def _wrap_loss(self, owner, attr: str, note) -> None:
        """`owner.attr` (a loss function, a Loss class's `__call__`), wrapped
        once, calls `note(args, kwargs)` while no loss is known."""

        def make(orig):
            def wrapper(*args, **kwargs):
                if self.loss is None:
                    self._guard("loss probe", note, args, kwargs)
                return orig(*args, **kwargs)

            wrapper.__name__ = attr
            return wrapper

        H.wrap_once(owner, attr, make, "_tfrepro_probe")

    # -- loss -------------------------------------------------------------------

    def _set_loss(self, info: dict) -> None:
        self.loss = info
        self.ctx.record("check.loss", info)

    def _note_loss_object(self, loss, source: str) -> None:
        if isinstance(loss, str):
            name, kind, logits = loss, _LOSS_KINDS.get(loss.lower(), "other"), False
        elif isinstance(loss, (dict, list, tuple)):
            name, kind, logits = type(loss).__name__, "multi", None
        else:
            name = getattr(loss, "__name__", None) or type(loss).__name__
            kind = _LOSS_KINDS.get(name.lower(), "other")
            try:
                logits = loss.get_config().get("from_logits")
            except Exception:
                logits = (getattr(loss, "_fn_kwargs", None) or {}).get("from_logits")
            if kind == "other":  # a LossFunctionWrapper around a cross-entropy function
                kind = _LOSS_KINDS.get(getattr(getattr(loss, "fn", None), "__name__", "").lower(), "other")
            logits = bool(logits) if logits is not None else (False if kind != "other" else None)
        self._set_loss({"name": name, "kind": kind, "from_logits": logits, "source": source})

    # -- first batches ----------------------------------------------------------

    def on_fit(self, model, args, kwargs) -> None:
        if self.fit_model is not None:
            return
        self.fit_model = model
        self._guard("late loss patches", self.patch_losses_late)
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
        elif x is not None and T.is_array(x):
            self.captured = True
            elements = []
            for i in range(2):
                sl = slice(i * batch_size, (i + 1) * batch_size)
                element = tf.nest.map_structure(lambda a: a[sl], (x, y) if y is not None else (x,))
                if not D.rows(element[0]):
                    break
                elements.append(element)
            self._record_batches(elements, "fit (arrays)")
            self._skip(
                "timing",
                "fit was given in-memory arrays: Keras slices them itself, there is no tf.data pipeline to time",
            )
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
            elements = list(ds.take(2))  # `busy`: no peek at our own iteration
        finally:
            self.busy = False
        self._record_batches(elements, {"fit": "fit (tf.data)", "iter": "first dataset iterated"}.get(source, source))

    def _record_batches(self, elements, source: str) -> None:
        import numpy as np

        def stats(value, role: str) -> list:
            return [T.tensor_stats(D.name(role, keys), leaf, np) for keys, leaf in D.leaves(value)]

        elements = [T.split_element(el) for el in elements]
        batches = [
            {"inputs": stats(el[0], "inputs"), "labels": stats(el[1] if len(el) > 1 else None, "labels")}
            for el in elements
        ]
        if elements:
            self.first_x = elements[0][0]
        self.ctx.record("check.batches", {"source": source, "batches": batches})

    # -- model ----------------------------------------------------------------

    def _record_model(self, model, call: bool = True) -> None:
        import numpy as np

        info = {"name": getattr(model, "name", type(model).__name__), "class": type(model).__name__}
        with contextlib.suppress(Exception):
            info["trainable"] = int(sum(int(np.prod(v.shape)) for v in model.trainable_weights))
            info["non_trainable"] = int(sum(int(np.prod(v.shape)) for v in model.non_trainable_weights))
            info["built"] = bool(getattr(model, "built", True))
        width = None
        with contextlib.suppress(Exception):
            outs = model.outputs
            if outs:
                width = outs[0].shape[-1]
                info["output_rank"] = len(outs[0].shape)
        if width is None and call and self.first_x is not None:
            with contextlib.suppress(Exception):
                out = model(self.first_x, training=False)
                first = out[0] if isinstance(out, (list, tuple)) else out
                width = first.shape[-1]
        info["output_width"] = int(width) if width is not None else None
        info["last_activation"] = T.last_activation(model)
        info["first_layer_input"] = None
        if call and self.first_x is not None:
            with contextlib.suppress(Exception):
                info["first_layer_input"] = T.first_weighted_input(model, self.first_x, np)
        self.ctx.record("check.model", info)

    # -- end ------------------------------------------------------------------

    def on_end(self, models) -> None:
        self._guard("environment", self._record_env)
        if not models:
            self._skip("model", "no Keras model was created during the trial")
        elif (main := self._main_model(models)) is not None:
            self._guard("model", self._record_model, main)
        if not self.captured:
            self._skip(
                "batches",
                "no batch was seen: fit got no data, or the loop iterated no "
                "tf.data.Dataset eagerly (a dataset iterated inside tf.function, "
                "or arrays sliced by hand, are not seen)",
            )
        self._guard("timing", self._record_timing, models)

    def _main_model(self, models):
        """The model that trains: the one fit ran on, else the largest built one."""
        if self.fit_model is not None:
            return self.fit_model
        best, best_n = None, -1
        for m in models:
            with contextlib.suppress(Exception):  # a model whose weights cannot be counted is skipped
                n = sum(math.prod(map(int, v.shape)) for v in m.trainable_weights)
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

        self.busy = True
        try:
            timing = T.time_pipeline(self.dataset, tf, np)
        finally:
            self.busy = False
        main = self._main_model(models) if models else None
        if main is not None and self.first_x is not None:
            try:
                timing.update(T.time_compute(main, self.first_x, tf))
            except Exception:
                timing["compute_error"] = traceback.format_exc(limit=1).strip().splitlines()[-1]
        self.ctx.record("check.timing", timing)

    def _record_env(self) -> None:
        env = {"python": platform.python_version(), "platform": platform.platform(), "executable": sys.executable}
        tf = sys.modules.get("tensorflow")
        if tf is not None:
            env["tensorflow"] = getattr(tf, "__version__", None)
            for lib in ("keras", "tf_keras"):
                if version := getattr(sys.modules.get(lib), "__version__", None):
                    env[lib] = version
            envprobe = H._sibling_file("envprobe")
            try:
                env["build"] = envprobe.build_info(tf)
            except Exception:
                env["build"] = {}
            env["physical_devices"] = dict(Counter(d.device_type for d in tf.config.list_physical_devices()))
            env["gpu_names"] = [gpu["name"] for gpu in envprobe.tf_gpus(tf)]
            with contextlib.suppress(Exception):
                env["logical_devices"] = dict(Counter(d.device_type for d in tf.config.list_logical_devices()))
        # An allow-list: other tools use TF_* too (Terraform keeps tokens in TF_TOKEN_*).
        env["tf_env"] = {k: v for k, v in os.environ.items() if k.startswith(_TF_ENV_PREFIXES) or k in _TF_ENV_NAMES}
        env["gpu_expected"], env["gpu_expected_why"] = T.gpu_expected(self.ctx.options.get("expect_gpu"))
        self.ctx.record("check.env", env)


def install(ctx) -> None:
    """The harness's plugin entry point (see harness.py's `PluginContext`)."""
    probes = _Probes(ctx)

    for name, fn in (("tensorflow", probes.on_tensorflow), ("keras", probes.on_keras), ("tf_keras", probes.on_keras)):
        ctx.after_import(name, lambda module, name=name, fn=fn: probes._guard(f"{name} patches", fn, module))
    ctx.add_fit_hook(lambda model, args, kwargs: probes._guard("fit probe", probes.on_fit, model, args, kwargs))
    ctx.add_end_hook(lambda models: probes._guard("end probe", probes.on_end, models))
