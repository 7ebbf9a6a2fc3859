"""The Keras side of the trial harness: Model.fit capture and the weight check.

Loaded by harness.py (`_side`) when `keras` or `tf_keras` finishes importing.

Per-step loss under fit, exact: the model's own `train_step` (a user
override included) is wrapped when its train function is built; every Mean
metric that receives the training loss (Keras 3's `_loss_tracker`, tf_keras's
compiled-loss mean, a model metric named "loss") reports what it is fed, per
thread (MirroredStrategy traces each replica in its own thread); the value
leaves the train function as an extra output, removed before callbacks see
the logs. A train_step that feeds no such metric falls back to recovering
the per-step loss from Keras's logged running mean (float32: ~1e-6 relative).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
import threading
import time

LOSS_KEY = "_tfrepro_loss"
BATCH_KEY = "_tfrepro_batch"  # a nan-state trial's batch output (StateSaver)
H = None  # the harness core module, set by harness.py


class StateSaver:
    """The state before a NaN step (when the config has `save_state_step` > 0).

    A NaN hunt's "nan-state" trial reruns the failing configuration, seeded and
    deterministic, and at step N (the step whose loss was the first non-finite
    one) saves under `state_dir`:

    - state.npz: every variable of the model (`w0`, `w1`, ... in `model.weights`
      order) and of its optimizer (`o0`, ..., its iteration count and slots), as
      they were when step N began: the last finite state;
    - batch.npz: the batch step N trained on, one array per leaf of the data
      structure `train_step` got, named by its path (harness_data.batch_outputs:
      `0` = x, `1` = y, `2` = sample weights; `0/name` for a dict input);
    - state.json: the step, the variable names and the batch's paths.

    `tfrepro report` writes replay.py beside repro.py from them: load the state,
    run that batch, see the NaN (Keras's `train_on_batch`).
    """

    def __init__(self, config: dict) -> None:
        self.step = int(config.get("save_state_step") or 0)
        self.dir = config.get("state_dir") or ""
        self.meta: dict = {"step": self.step}

    def save_state(self, model) -> None:
        import numpy as np

        variables = getattr(getattr(model, "optimizer", None), "variables", None)
        if callable(variables):
            variables = variables()
        arrays, names = {}, {}
        for prefix, key, group in (("w", "weights", model.weights), ("o", "optimizer", variables or [])):
            arrays.update({f"{prefix}{i}": np.asarray(v.numpy()) for i, v in enumerate(group)})
            names[key] = [getattr(v, "path", None) or v.name for v in group]
        self._write("state.npz", arrays, names)

    def save_batch(self, batch: dict) -> None:
        import numpy as np

        arrays = {path: np.asarray(t) for path, t in batch.items()}
        self._write("batch.npz", arrays, {"batch": {p: [list(a.shape), str(a.dtype)] for p, a in arrays.items()}})

    def _write(self, npz: str, arrays: dict, meta: dict) -> None:
        """`arrays` as `npz`, and state.json with `meta` added."""
        import numpy as np

        os.makedirs(self.dir, exist_ok=True)
        np.savez(os.path.join(self.dir, npz), **arrays)
        self.meta.update(meta)
        with open(os.path.join(self.dir, "state.json"), "w", encoding="utf-8") as f:
            json.dump(self.meta, f, indent=1)


@functools.cache
def _saver():
    """The StateSaver of a nan-state trial; None elsewhere or when it cannot start."""
    return H._quietly("nan state", StateSaver, H.S.config) if H.S.config.get("save_state_step") else None


def _save(what: str, *args) -> None:
    """The nan-state trial's save at the step it wants, the one about to run (a
    failure is noted, never raised)."""
    saver = _saver()
    if saver is not None and saver.dir and H.S.steps_seen + 1 == saver.step:
        H._quietly("nan state", getattr(saver, what), *args)


def _make_callback(base, lib: str):
    class TrialCallback(base):
        """Last in the list: its batch end comes after the user's callbacks."""

        _supports_tf_logs = True  # tf_keras: do not convert every log to numpy for us
        _t0 = 0.0  # batch begin
        _k = 0  # batches this epoch
        _prev_mean = 0.0  # the logged running mean after batch _k - 1

        def on_epoch_begin(self, epoch, logs=None):
            self._k = 0
            self._prev_mean = 0.0

        def on_train_batch_begin(self, batch, logs=None):
            H.S.pending_loss = None
            _save("save_state", self.model)
            self._t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self._k += 1
            if getattr(H.S, "pending_batch", None) is not None:
                _save("save_batch", H.S.pending_batch)
                if H._DATA:  # what the script feeds training (harness_data.py, with `record_data`)
                    H._quietly("data batch", H._DATA.see_batch, H.S.pending_batch)
            loss = None
            if H.S.pending_loss is not None:
                loss = float(H.S.pending_loss)
                H.S.extra["fit_loss_source"] = "exact"
            elif logs and "loss" in logs:
                # Keras logs the running mean over the epoch; equal batch weights assumed.
                mean = float(logs["loss"])
                loss = self._k * mean - (self._k - 1) * self._prev_mean
                self._prev_mean = mean
                H.S.extra["fit_loss_source"] = "running_mean"
            else:
                H.S.extra["fit_loss_source"] = "none"
            H.record_step(loss, time.perf_counter() - self._t0)

    TrialCallback.__name__ = f"TfreproTrialCallback_{lib}"
    return TrialCallback


def _patch_trainer(cls, callback_base, lib: str, distributed_sum: bool) -> None:
    """Wrap fit and make_train_function of a Keras trainer class."""
    if getattr(cls, "_tfrepro_patched", False):
        return
    callback_cls = _make_callback(callback_base, lib)
    orig_fit = cls.fit
    orig_make = cls.make_train_function

    def fit(self, *args, **kwargs):
        # Before it runs: the fit hooks, our callback added to the script's, the call's tag
        # (fit#N at file:line) and what it ran (devices.py).
        H.S.models.setdefault(id(self), self)
        H.S.keras_lib = H.S.keras_lib or lib
        H.S.mode = "fit"
        args = list(args)
        for hook in H.S.fit_hooks:
            H._quietly("fit hook", hook, self, args, kwargs)
        if len(args) > 5:  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
            args[5] = _with_callback(args[5], callback_cls())
        else:
            kwargs["callbacks"] = _with_callback(kwargs.get("callbacks"), callback_cls())
        tag = None
        if H.S.fit_depth == 0:  # a training call of the script: its steps are those from here to the next
            tag = f"fit#{len(H.S.calls) + 1}"
            H.S.calls.append({"call": tag, "where": H.FRAMES.user_where() or "?", "start": H.S.steps_seen})
            H.S.extra["calls"] = H.S.calls
            if H.S.budget is not None:
                H.S.budget.begin_call(tag)
        if H._DEVICES is not None:  # its compile mode, replicas in sync, precision policy
            H._DEVICES.record_fit(self, H.S.extra, H.keras_module())
        H.S.fit_depth += 1
        try:
            history = orig_fit(self, *args, **kwargs)
        finally:
            H.S.fit_depth -= 1
        if getattr(self, "stop_training", False):  # a callback of the script's asked fit to stop (EarlyStopping)
            H.S.extra.setdefault("callback_stops", []).append(tag or "fit")
        if H.S.budget is not None and H.S.fit_depth == 0 and H.S.steps_seen and H.S.budget.call_ended(tag):
            # A timing trial is for step times: it ends with the training it timed (the calls it was
            # asked to time: the first one, or the ones the failing configuration showed slower),
            # before the script's post-training code.
            H._stop("fit ended (timing trial)")
        return history

    def make_train_function(self, *args, **kwargs):
        # The instance's own train_step (a user override included) is wrapped
        # before the train function is built from it.
        if "train_step" not in vars(self):
            object.__setattr__(self, "train_step", _capturing_step(self, self.train_step, distributed_sum))
        orig_make(self, *args, **kwargs)
        H.wrap_once(self, "train_function", _taking_outputs)
        return self.train_function

    cls.fit = fit
    cls.make_train_function = make_train_function
    cls._tfrepro_patched = True


def _taking_outputs(fn):
    """The built train function `fn` that takes our loss and batch out of
    its outputs (the captured step adds them)."""

    def train_function(*a, **k):
        out = fn(*a, **k)
        if isinstance(out, dict) and LOSS_KEY in out:
            out = dict(out)
            H.S.pending_loss = out.pop(LOSS_KEY)
            H.S.pending_batch = out.pop(BATCH_KEY, None)
        return out

    return train_function


def _capturing_step(model, step, distributed_sum: bool):
    """train_step that also returns the loss its loss tracker was fed."""

    def train_step(data):
        # MirroredStrategy traces one replica per thread: captures are per thread. Hooked, each once:
        # the Mean metrics that receive the training loss (Keras 3's tracker, tf_keras's
        # compiled-loss mean, and any model metric named "loss": the custom train_step recipe).
        found = [
            getattr(model, "_loss_tracker", None),
            getattr(getattr(model, "compiled_loss", None), "_total_loss_mean", None),
        ]
        with contextlib.suppress(Exception):
            found += [m for m in model.metrics if getattr(m, "name", None) == "loss"]
        for tracker in {id(t): t for t in found if t is not None and hasattr(t, "update_state")}.values():
            _hook_tracker(tracker)
        _tls.seen = seen = []
        try:
            logs = step(data)
        finally:
            _tls.seen = None
        if seen and isinstance(logs, dict):
            import tensorflow as tf

            # The step's loss as one value after the trainer's per-replica reduction: Keras 3 averages
            # replicas (equal shards: exact); tf_keras sums them, so each replica contributes its batch share.
            value, weight = seen[-1]
            value = tf.cast(value, tf.float32)
            ctx = tf.distribute.get_replica_context()
            if distributed_sum and ctx is not None and ctx.num_replicas_in_sync > 1 and weight is not None:
                w = tf.cast(weight, tf.float32)
                value = value * w / ctx.all_reduce("sum", w)
            logs = dict(logs)
            logs[LOSS_KEY] = value
            if _saver() is not None or H.S.config.get("record_data"):  # the batch leaves the step too
                H._quietly("nan state batch", lambda: logs.update({BATCH_KEY: H._side("data").batch_outputs(data)}))
        return logs

    train_step.__wrapped__ = step
    return train_step


_tls = threading.local()


def _hook_tracker(tracker) -> None:
    """Make the loss tracker report what it is fed to the train_step running
    in this thread (once per tracker; a no-op outside our train_step)."""
    if vars(tracker).get("_tfrepro_hooked"):
        return
    own = tracker.update_state

    def update_state(values, sample_weight=None, *args, **kwargs):
        seen = getattr(_tls, "seen", None)
        if seen is not None:
            seen.append((values, sample_weight))
        return own(values, sample_weight, *args, **kwargs)

    # object.__setattr__: no Keras attribute tracking for a plain function
    object.__setattr__(tracker, "update_state", update_state)
    object.__setattr__(tracker, "_tfrepro_hooked", True)


def _with_callback(callbacks, cb):
    if hasattr(callbacks, "append") and not isinstance(callbacks, (list, tuple)):
        callbacks.append(cb)  # a CallbackList
        cb.set_model(getattr(callbacks, "model", None))
        return callbacks
    return [*(callbacks or ()), cb]


JIT_DROPPED = (
    "Keras ignored jit_compile=True: op determinism is on (deterministic = true), so "
    "this trial ran without XLA; set deterministic = false in tfrepro.toml to test XLA"
)


AUTO_JIT_DROPPED = (
    'Keras\'s default jit_compile="auto" would compile this model with XLA on the GPU, but op '
    "determinism is on (deterministic = true), so this trial ran without XLA; set "
    "deterministic = false in tfrepro.toml to test what XLA does"
)


def auto_jit_dropped(model, kwargs: dict, tf, deterministic: bool) -> bool:
    """jit_compile="auto" (the default) that Keras 3 would resolve to XLA on
    this machine - a GPU, no distribution strategy, no eager run, every layer
    XLA-capable - and that op determinism turned off. On a CPU-only machine
    "auto" means no XLA: nothing was dropped."""
    if kwargs.get("jit_compile", "auto") != "auto" or kwargs.get("run_eagerly") or not deterministic:
        return False
    if getattr(model, "jit_compile", None) is not False or tf is None:
        return False
    try:
        gpu = any(d.device_type != "CPU" for d in tf.config.list_physical_devices())
        return (
            gpu
            and not getattr(model, "_distribute_strategy", None)
            and all(getattr(x, "supports_jit", True) for x in model._flatten_layers())
        )
    except Exception:
        return False


def on_keras(keras) -> None:
    if H.keras2(keras):  # tf_keras, or TensorFlow <= 2.15's Keras 2 (laid out alike)
        try:  # keras 2.13+ (and tf_keras) keep their code under <name>.src
            Model = importlib.import_module(f"{keras.__name__}.src.engine.training").Model
        except ImportError:
            Model = importlib.import_module(f"{keras.__name__}.engine.training").Model
        _patch_trainer(Model, keras.callbacks.Callback, keras.__name__, distributed_sum=True)
        _patched(keras, Model)
        return
    if keras.backend.backend() != "tensorflow":
        H.S.errors.append(f"keras backend {keras.backend.backend()!r} is not measured")
        return
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    from keras.src.trainers.trainer import Trainer

    _patch_trainer(TensorFlowTrainer, keras.callbacks.Callback, "keras", distributed_sum=False)
    orig_compile = Trainer.compile

    # Keras 3 quietly drops `jit_compile=True` under op determinism, which the harness turns on: an
    # XLA feature would then be a no-op in every trial. Say so in the result rather than let a bisect
    # blame or clear XLA wrongly.
    def compile(self, *args, **kwargs):
        dev = H._DEVICES  # devices.py: jit_compile="auto" pinned, the resolved mode recorded, the warning
        if dev is None:
            return orig_compile(self, *args, **kwargs)
        kwargs, requested, pinned = dev.pin_compile(args, kwargs, H.S.config)
        out = orig_compile(self, *args, **kwargs)
        dev.record_compile(self, H.S.extra, requested, pinned)
        if kwargs.get("jit_compile") is True and getattr(self, "jit_compile", None) is False:
            dev.warn(H.S.extra, JIT_DROPPED)
        elif auto_jit_dropped(self, kwargs, sys.modules.get("tensorflow"), bool(H.S.config.get("deterministic"))):
            dev.warn(H.S.extra, AUTO_JIT_DROPPED)
        return out

    Trainer.compile = compile
    _patched(keras, Trainer)


def _patched(keras, model_cls) -> None:
    """Every model of `model_cls` tracked, and Keras seeded when the trial is deterministic."""
    orig = model_cls.__init__

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        H.S.models.setdefault(id(self), self)

    model_cls.__init__ = __init__
    if H.S.config.get("deterministic"):
        keras.utils.set_random_seed(int(H.S.config.get("seed", 0)))


def user_models() -> list:
    """Tracked models minus Keras's own (a Keras 3 Sequential's inner Functional)."""
    inner = {id(getattr(m, "_functional", None)) for m in H.S.models.values()}
    return [m for m in H.S.models.values() if id(m) not in inner]


def check_weights() -> tuple[bool | None, list[str]]:
    if "tensorflow" not in sys.modules or not H.S.models:
        return None, []
    import numpy as np

    weights = {}  # each variable once, in the order the models hold them
    for model in user_models():
        with contextlib.suppress(Exception):
            weights.update({id(w): w for w in model.weights})
    checked, bad = 0, []
    for w in weights.values():
        try:
            a = np.asarray(w.numpy())
            if a.dtype.kind not in "fc":
                if a.dtype.kind != "V":
                    continue
                a = a.astype(np.float32)  # bfloat16 and friends
            checked += 1
            if not np.isfinite(a).all():
                bad.append(getattr(w, "path", None) or w.name)
        except Exception:
            H.note_error("weight check")
    return (not bad, bad) if checked else (None, [])
