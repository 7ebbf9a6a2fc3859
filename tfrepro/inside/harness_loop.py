"""Custom training loops, measured by what every loop does rather than by
what it prints (Contract 3).

Loaded by harness.py (`_side`) when TensorFlow, Keras or tf_keras finish
importing.

A training step is one call of the optimizer's `apply_gradients`/`apply`
(Keras 3, Keras 2 and tf_keras optimizers, loss-scale wrappers included;
nested calls - a wrapper calling its inner optimizer, `apply_gradients`
calling `apply` - count once) outside `Model.fit` (fit is measured by
harness_keras.py). Its loss is the target of the last `GradientTape.gradient`
before it (the unscaled loss when the target came from `scale_loss` /
`get_scaled_loss`; a non-scalar target is summed, as the tape does).

- Eagerly, the step is recorded right after the apply returns.
- Inside a `tf.function` the hooks run at trace time: the loss is written
  into one variable (a ring buffer of losses per replica slot and a count
  per slot) by ops of the traced graph, which XLA compiles too
  (`jit_compile=True`, where a callback op is not allowed); after every
  outermost `tf.function` call returns, the new entries are read and
  recorded as steps. A step that traced (or retraced) the function is listed
  in extra["loop_traced_steps"]; as for fit, the first steps are warm-up and
  never enter a timing comparison.
- Under `strategy.run` every replica writes its own slot; a step's loss is
  the sum of the replica losses (the optimizer sums the replicas' gradients,
  so the sum is the objective it descends: a loss averaged over the global
  batch, as `tf.nn.compute_average_loss` gives, sums to fit's loss), and the
  per-replica losses are kept in extra["loop_replica_losses"].

`H.loop_step` records it. A printed `step=N loss=X` line overrides these
steps (`yield_to_stdout`).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

BUF = 256  # steps one tf.function call can hold before the oldest losses are lost
R_MAX = 32  # replica slots
MISSING = -3.0e38  # a step whose loss could not be identified
MAX_TRACED = 200  # entries kept in extra["loop_traced_steps"]
H = None  # the harness core module, set by harness.py

_tls = threading.local()
_lock = threading.Lock()


L = SimpleNamespace(  # this process's loop
    recorder=None,  # _GraphRecorder, created at the first traced step
    primary=None,  # id of the optimizer whose steps count
    traced=False,  # a trace happened since the last recorded step
    pending={},  # replica id -> its eager losses waiting for the other replicas
    first_step=None,  # S.steps_seen when this source started recording
    t_ref0=None,  # S.t_ref then: a printed line's step time starts there
)


# -- the graph side --------------------------------------------------------------------


class _GraphRecorder:
    """One variable written by the traced step, read after each outermost call."""

    def __init__(self, tf) -> None:
        # Made in a fresh thread: eager, outside any strategy scope or graph of the tracer (an error
        # is raised here, reported by the caller). Rows 0..BUF-1: losses per replica slot; row BUF:
        # the step count per slot (float32: every device has float32 scatter kernels, exact to 2**24
        # steps). One variable, so one read after each call.
        def make():
            return tf.Variable(tf.zeros([BUF + 1, R_MAX], tf.float32), trainable=False, name="tfrepro_loss")

        with ThreadPoolExecutor(1, thread_name_prefix="tfrepro-loop-vars") as pool:
            self.buf = pool.submit(make).result()
        self.seen = [0] * R_MAX

    def write(self, tf, loss, replica) -> None:
        """Ops of the graph being traced: buf[cnt[r] % BUF, r] = loss; cnt[r] += 1."""
        r = tf.cast(replica, tf.int32) if not isinstance(replica, int) else replica
        count = tf.gather(tf.gather(self.buf, BUF), r)  # ResourceGather: XLA has it (not ResourceGatherNd)
        i = tf.math.floormod(tf.cast(count, tf.int32), BUF)
        value = tf.constant(MISSING, tf.float32) if loss is None else _scalar(tf, loss)
        self.buf.scatter_nd_update(tf.reshape(tf.stack([i, r]), [1, 2]), tf.reshape(value, [1]))
        self.buf.scatter_nd_add(tf.reshape(tf.stack([tf.constant(BUF, tf.int32), r]), [1, 2]), tf.constant([1.0]))

    def drain(self) -> list[list[float | None]]:
        """The steps since the last drain: per step, the losses of the replicas that ran it."""
        buf = self.buf.numpy()
        cnt = [int(c) for c in buf[BUF]]
        new = [c - s for c, s in zip(cnt, self.seen)]
        n = max(new)
        if n <= 0:
            return []

        def loss(r: int, k: int) -> float | None:
            """Slot r's k-th loss; None when unknown or overwritten (more than BUF came after it)."""
            v = float(buf[k % BUF, r]) if cnt[r] - k <= BUF else MISSING
            return None if v == MISSING else v

        steps = [[loss(r, self.seen[r] + j) for r in range(R_MAX) if new[r] > j] for j in range(n)]
        self.seen = cnt
        return steps


def _scalar(tf, loss):
    """The loss as one float32 scalar: a list or a non-scalar target summed, as the tape does."""
    parts = [tf.cast(tf.reduce_sum(p), tf.float32) for p in (loss if isinstance(loss, (list, tuple)) else [loss])]
    return sum(parts[1:], parts[0])  # the first + the second + ...: the ops a loop would add


# -- recording ------------------------------------------------------------------------------


def _source() -> str | None:
    return H.S.extra.get("loop_loss_source")


def _record(values: list, dt: float | None = None) -> None:
    """One step of the loop from the losses of its replicas (None: unknown)."""
    S = H.S
    if _source() == "stdout" or os.getpid() != S.pid:
        return
    if _source() is None:
        S.extra["loop_loss_source"] = "apply"
        L.first_step, L.t_ref0 = S.steps_seen, S.t_ref
    known = [v for v in values if v is not None]
    loss = math.fsum(known) if known and len(known) == len(values) else None
    if len(values) > 1:
        S.extra.setdefault("loop_replica_losses", []).append(
            [v if v is not None and math.isfinite(v) else None for v in values]
        )
    if L.traced:
        L.traced = False
        traced = S.extra.setdefault("loop_traced_steps", [])
        if len(traced) < MAX_TRACED:
            traced.append(S.steps_seen + 1)
    # The next step's time starts after it: the harness's own bookkeeping is not the loop's (fit's
    # step time, from batch begin to batch end, does not hold it either).
    H.loop_step(loss, dt)


def yield_to_stdout() -> None:
    """A `step=N loss=X` line was printed: the printed steps count, not ours."""
    S = H.S
    if _source() == "apply" and L.first_step is not None:
        k = L.first_step
        del S.losses[k:]
        del S.step_times[k:]
        S.steps_seen = k
        S.t_ref = L.t_ref0 if L.t_ref0 is not None else S.t_ref
        if S.first_nonfinite_step is not None and S.first_nonfinite_step > k:
            S.first_nonfinite_step = None
        if S.budget is not None:
            S.budget = type(S.budget)(S.config)
        for key in ("loop_replica_losses", "loop_traced_steps"):
            S.extra.pop(key, None)
    S.extra["loop_loss_source"] = "stdout"


# -- the hooks ----------------------------------------------------------------------------


def _on_apply(optimizer) -> None:
    tf = sys.modules["tensorflow"]
    if L.primary is None:
        L.primary = id(optimizer)
    elif L.primary != id(optimizer):
        H.S.extra["loop_other_optimizer"] = type(optimizer).__name__
        return
    # The step's loss: the tape's last target (the unscaled loss when it came from scale_loss).
    target = getattr(_tls, "target", None)
    _tls.target = None
    scaled = getattr(_tls, "scaled", None)
    if scaled is not None and target is scaled[0]:
        target = scaled[1]
    rid, n = 0, 1  # the calling context's replica id (an int or a tensor) and replicas in sync
    ctx = tf.distribute.get_replica_context()
    if ctx is not None and int(ctx.num_replicas_in_sync) > 1:
        n = int(ctx.num_replicas_in_sync)
        rid = getattr(ctx, "_replica_id_in_sync_group", None)
        if not isinstance(rid, int):
            rid = ctx.replica_id_in_sync_group
            static = tf.get_static_value(rid)
            rid = int(static) if static is not None else rid
    if isinstance(rid, int) and rid >= R_MAX:
        return
    if tf.executing_eagerly():  # under strategy.run each replica's thread applies: a step is all of them
        value = None if target is None else float(_scalar(tf, target).numpy())
        if n == 1:  # one replica: its step, whatever an unfinished replicated step left pending
            _record([value])
            return
        with _lock:
            L.pending.setdefault(int(rid), []).append(value)
            if all(L.pending.get(r) for r in range(min(n, R_MAX))):
                _record([L.pending[r].pop(0) for r in range(min(n, R_MAX))])
        return
    L.traced = True
    if L.recorder is None:
        L.recorder = _GraphRecorder(tf)
    if target is not None:  # a symbolic target of the graph being traced or of a graph it captures from, or none
        current = tf.compat.v1.get_default_graph()
        for part in target if isinstance(target, (list, tuple)) else [target]:
            g, graph = getattr(part, "graph", None), current
            while graph is not None and graph is not g:
                graph = getattr(graph, "outer_graph", None)
            if g is None or graph is None:
                target = None
                break
    L.recorder.write(tf, target, rid)


def _apply_wrapper(orig):
    def apply(self, *args, **kwargs):
        S = H.S
        if getattr(_tls, "apply_depth", 0) or S.fit_depth or os.getpid() != S.pid:
            return orig(self, *args, **kwargs)
        _tls.apply_depth = 1
        try:
            out = orig(self, *args, **kwargs)
        finally:
            _tls.apply_depth = 0
        H._quietly("loop step", _on_apply, self)
        return out

    return apply


def _gradient_wrapper(orig):
    def gradient(self, target, *args, **kwargs):
        out = orig(self, target, *args, **kwargs)
        if not getattr(_tls, "apply_depth", 0):
            _tls.target = target
        return out

    return gradient


def _scale_wrapper(orig):
    def scale(self, loss, *args, **kwargs):
        out = orig(self, loss, *args, **kwargs)
        _tls.scaled = (out, loss)
        return out

    return scale


def _call_wrapper(orig):
    def __call__(self, *args, **kwargs):
        if getattr(_tls, "fn_depth", 0) or H.S.fit_depth:
            return orig(self, *args, **kwargs)
        tf = sys.modules.get("tensorflow")
        if tf is None or not tf.executing_eagerly():
            return orig(self, *args, **kwargs)
        _tls.fn_depth = 1
        try:
            out = orig(self, *args, **kwargs)
        finally:
            _tls.fn_depth = 0
        end = time.perf_counter()
        if L.recorder is not None and _source() != "stdout":
            H._quietly("loop step (graph)", _drain, end)
        return out

    return __call__


def _drain(end: float) -> None:
    """The steps the call that ended at `end` recorded (reading them back is not the loop's time)."""
    steps = L.recorder.drain()
    if not steps:
        return
    dt = (end - H.S.t_ref) / len(steps)
    for values in steps:
        _record(values, dt)


def _patch(cls, method: str, wrapper) -> None:
    if method in vars(cls):  # the class's own method, not one it inherits
        H.wrap_once(cls, method, wrapper)


def _patch_classes(specs, methods: list, wrapper) -> None:
    """`methods` of each (module, class) of `specs` wrapped; absent modules and classes are skipped."""
    for module_name, class_name in specs:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        for m in methods:
            _patch(cls, m, wrapper)


def on_tensorflow(tf) -> None:
    _patch(tf.GradientTape, "gradient", _gradient_wrapper)
    eager = "tensorflow.python.eager"
    functions = [
        (f"{eager}.polymorphic_function.polymorphic_function", "Function"),
        (f"{eager}.def_function", "Function"),
    ]
    _patch_classes(functions, ["__call__"], _call_wrapper)


_APPLY = ["apply_gradients", "apply"]


def on_keras(keras) -> None:
    if H.keras2(keras):  # Keras 2 or tf_keras: its code under <name>.src (Keras 2's also under <name>)
        for root in (f"{keras.__name__}.src", keras.__name__):
            lso = f"{root}.mixed_precision.loss_scale_optimizer"
            optimizers = [
                (f"{root}.optimizers.optimizer", "_BaseOptimizer"),
                (f"{root}.optimizers.optimizer", "Optimizer"),
                (f"{root}.optimizers.legacy.optimizer_v2", "OptimizerV2"),
            ]
            scaling = [(lso, "BaseLossScaleOptimizer"), (lso, "LossScaleOptimizer"), (lso, "LossScaleOptimizerV3")]
            _patch_classes([*optimizers, *scaling[1:]], _APPLY, _apply_wrapper)  # the wrappers' own apply too
            _patch_classes(scaling, ["get_scaled_loss"], _scale_wrapper)
        return
    optimizers = [
        ("keras.src.optimizers.base_optimizer", "BaseOptimizer"),
        ("keras.src.optimizers.loss_scale_optimizer", "LossScaleOptimizer"),
    ]
    _patch_classes(optimizers, _APPLY, _apply_wrapper)
    _patch_classes(optimizers, ["scale_loss"], _scale_wrapper)
