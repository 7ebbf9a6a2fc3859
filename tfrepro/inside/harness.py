"""The trial harness: runs INSIDE the trial process, never in the CLI.

Standalone on purpose: stdlib + TensorFlow/Keras only, no tfrepro import. It is
loaded by path (module name `_tfrepro_harness`) from `_inject/sitecustomize.py`,
which the parent puts first on PYTHONPATH; it activates only when the
environment variable TFREPRO_TRIAL_CONFIG names a config JSON, and pops that
variable so the processes the script spawns are not measured. So `python
repro.py` and any `python ...` command are measured with no code in the project.

What it does (Contract 3):
- seeds (python, numpy, TensorFlow, Keras) and op determinism when the config
  says `deterministic`, applied right after `tensorflow` / `keras` / `tf_keras`
  finish importing (post-import hooks on sys.meta_path; nothing is imported
  early, so a script can still set TF_USE_LEGACY_KERAS or logical devices;
  in a warm child, where they were imported before the trial, at the
  script's first import of them, as in a cold process);
- `Model.fit` (Keras 3 and tf_keras), in harness_keras.py (loaded by path when
  Keras is imported): the exact per-step loss from the model's loss tracker
  (running-mean recovery as the fallback). Step time = on_train_batch_begin →
  end of our callback, which runs after the user's callbacks. With
  steps_per_execution > 1 a "step" is one execution;
- custom loops: a step is a call of the optimizer's `apply_gradients`/`apply`
  outside fit, its loss the target of the step's `GradientTape.gradient`, in
  harness_loop.py; printed `step=<int> loss=<float>` lines override them
  (`StdoutTap`);
- stops at `steps` (a trial run "until its symptom", `until_s` > 0: after
  `until_s` seconds of training instead) and at the first non-finite loss: the result is written and
  the process leaves with os._exit(0) right there (no exception to be
  swallowed by the script's own `except`); a timing trial (`steps_max` > 0)
  stops on its time budget instead (memory.py's Budget);
- at the end (stop, normal exit, or uncaught exception) checks the weights of
  every Keras model created during the trial for NaN/Inf, and writes the
  result JSON to the path named in the config. An uncaught exception is a
  crash whose `error` is its last traceback line ("Type: message", the
  message's first line when it runs over several).

Plugin hook (used by `tfrepro check`): the config's `plugins`, `PluginContext`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import re
import sys
import threading
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG_ENV = "TFREPRO_TRIAL_CONFIG"
# The steps so far are saved at the first step, then at most this often.
PROGRESS_EVERY_S = 1.0


class _State:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.steps = int(config.get("steps") or 0)
        self.until_s = float(config.get("until_s") or 0)  # "until its symptom": a training-time budget
        self.t_first: float | None = None  # when the first step ended (the budget's start)
        self.budget = None  # a timing trial's memory.Budget
        self.result_path = config["result_path"]
        self.losses: list[float] = []
        self.step_times: list[float] = []
        self.steps_seen = 0
        self.last_progress = float("-inf")
        self.first_nonfinite_step: int | None = None
        self.mode = "none"
        self.crashed = False
        self.error: str | None = None
        self.stop_reason = "exit"
        self.models: dict = {}  # id -> model; strong refs: a model built in a function must survive until the check
        self.keras_lib: str | None = None  # "keras" | "tf_keras"
        self.extra: dict = {}
        self.errors: list[str] = []
        self.fit_hooks: list = []
        self.end_hooks: list = []
        self.fit_depth = 0
        # The script's training calls (fit#1, fit#2...), in order (harness_keras.py's fit):
        # {"call", "where" (file:line), "start" (steps before it)}.
        self.calls: list[dict] = []
        self.pending_loss = None  # exact loss tensor of the last fit step
        self.t_ref = time.perf_counter()  # reference for the first loop step
        self.lock = threading.Lock()
        self.finished = False
        self.pid = os.getpid()  # a forked worker inherits all this: it must stay silent


S: _State | None = None


def note_error(where: str) -> None:
    if S is not None:
        S.errors.append(f"{where}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")


# -- recording ----------------------------------------------------------------


def record_step(loss: float | None, dt: float) -> None:
    """One training step (loss None: a fit whose logs carry no loss; the
    step still counts towards the cap). Stops the process at the cap or at
    a non-finite loss."""
    if os.getpid() != S.pid:
        return
    S.steps_seen += 1
    S.step_times.append(dt)
    if _MEMORY:
        _quietly("memory sample", _MEMORY.step)
    if loss is not None:
        S.losses.append(loss)
        if not math.isfinite(loss):
            S.first_nonfinite_step = S.steps_seen
            _stop("nonfinite")
    if S.budget is not None:
        if S.budget.step(dt):
            _stop("budget")
    elif S.steps and S.steps_seen >= S.steps:
        _stop("steps")
    elif S.until_s:  # "until its symptom": `until_s` s of training from the first step (not imports, data loading)
        if S.t_first is None:
            S.t_first = time.monotonic()
        elif time.monotonic() - S.t_first >= S.until_s:
            _stop("budget_s")
    now = time.monotonic()
    if now - S.last_progress >= PROGRESS_EVERY_S:  # what a trial killed at its timeout leaves behind
        S.last_progress = now
        progress = {
            "mode": S.mode,
            "losses": [x if math.isfinite(x) else None for x in S.losses],
            "step_times": S.step_times,
            "steps_run": S.steps_seen,
        }
        try:
            _write_json(progress_path(S.result_path), progress)
        except OSError:
            note_error("progress")


def loop_step(loss: float | None, dt: float | None = None) -> None:
    """One step of a custom loop: an optimizer's apply (harness_loop.py) or a
    printed `step=N loss=X` line (`StdoutTap`). Its time runs from the
    end of the step before (the first: from TensorFlow's import), unless the
    caller measured `dt`; the harness's own bookkeeping is in neither step."""
    if S.mode == "none":
        S.mode = "loop"
    record_step(loss, time.perf_counter() - S.t_ref if dt is None else dt)
    S.t_ref = time.perf_counter()


# -- custom loops: the trial's sys.stdout, tapped for step lines --------------------------
# A line `step=<int> loss=<float>` written to sys.stdout (Python level: `print`, not
# `tf.print`) outside `Model.fit` is one step of a custom loop (`loop_step`); everything is
# passed through to the real stream unchanged.

STEP_LINE = re.compile(r"^\s*step=(-?\d+)\s+loss=(\S+)")
_MAX_PENDING_LINE = 4096


class StdoutTap:
    """sys.stdout proxy that parses `step=<int> loss=<float>` lines."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, s):
        n = self._stream.write(s)
        if S.fit_depth == 0 and isinstance(s, str):
            if "\n" not in s:
                if len(self._pending) < _MAX_PENDING_LINE:
                    self._pending += s
                return n
            *lines, self._pending = (self._pending + s).split("\n")
            for m in filter(None, map(STEP_LINE.match, lines)):
                try:
                    loss = float(m.group(2).rstrip(",;"))
                except ValueError:
                    continue
                loop = sys.modules.get("_tfrepro_harness_loop")
                if loop is not None:  # the printed line overrides the steps seen at apply_gradients
                    loop.yield_to_stdout()  # (and its time starts where theirs did)
                self._stream.flush()
                loop_step(loss)
        return n

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def progress_path(result_path: str) -> str:
    return result_path + ".progress"


def _write_json(path: str, data: dict, **options) -> None:
    """`data` as `path`, whole or not at all (written beside it, then renamed)."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, **options)
    os.replace(path + ".tmp", path)


# Exit code of a trial whose harness could not write its result.
HARNESS_FAILED = 70


def _stop(reason: str) -> None:
    """End the trial here: no exception for the script to swallow, no
    interpreter teardown to wait for."""
    S.stop_reason = reason
    code = 0
    try:
        finish()
    except BaseException:
        traceback.print_exc()
        code = HARNESS_FAILED
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


_DEVICES = None  # devices.py (loaded by path) once TensorFlow is set up


def _on_tensorflow(tf) -> None:
    global _DEVICES
    S.t_ref = time.perf_counter()
    atexit.register(finish)  # runs before TensorFlow's own atexit handlers
    try:  # `--replicas N` before the script's first op, and what ran (devices.py)
        _DEVICES = _sibling_file("devices")
        _DEVICES.split(tf, S.config, S.extra)
        _DEVICES.watch_strategies(tf, S.extra)
    except Exception:
        note_error("devices")
    if S.config.get("deterministic"):
        seed = int(S.config.get("seed", 0))
        import random

        import numpy as np

        random.seed(seed)
        np.random.seed(seed)
        tf.random.set_seed(seed)
        tf.config.experimental.enable_op_determinism()


def _load(name: str, path: str):
    """The file at `path`, loaded as module `name` (the one way the harness
    loads code: by path, never through tfrepro)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    compiled = getattr(sys.modules.get("_tfrepro_warm"), "COMPILED", {})  # a warm child: compiled once
    exec(compiled.get(path) or spec.loader.get_code(name), module.__dict__)
    return module


def _sibling_file(name: str):
    """<name>.py next to this file, loaded by path as `_tfrepro_<name>`."""
    return _load(f"_tfrepro_{name}", os.path.join(_HERE, f"{name}.py"))


_SIDES: dict = {}  # "keras", "loop", "data" (harness_<name>.py): loaded on first use


def _side(name: str):
    """harness_<name>.py, loaded once on first use (as `_tfrepro_harness_<name>`;
    the parent never needs it) and handed this module as its `H`: the harness
    core, whose state `H.S` it fills."""
    if name not in _SIDES:
        _SIDES[name] = _sibling_file(f"harness_{name}")
        _SIDES[name].H = sys.modules[__name__]
    return _SIDES[name]


_HOOKS = {
    "tensorflow": _on_tensorflow,
    "keras": lambda module: _side("keras").on_keras(module),
    "tf_keras": lambda module: _side("keras").on_keras(module),
}


_FINDER = None  # harness_imports.PostImportFinder, once activated
FRAMES = None  # harness_data.py, for the user's file:line (`user_where`, `is_library`), once activated
_DATA = None  # harness_data.Recorder: what the script feeds training
_MEMORY = None  # memory.py (loaded by path): this trial's MemorySampler, None when it could not load


def _quietly(where: str, fn, *args):
    """fn(*args), or None with the error noted in harness_errors: a part of
    the harness that fails never fails the trial."""
    try:
        return fn(*args)
    except Exception:
        note_error(where)
        return None


def wrap_once(owner, attr: str, make, mark: str = "_tfrepro") -> None:
    """`owner.attr` replaced by `make(orig)`, the one way the harness and its
    plugins patch code: once (the wrapper carries `mark`), the original kept
    as `__wrapped__`; an absent attribute is left alone."""
    orig = getattr(owner, attr, None)
    if orig is None or getattr(orig, mark, False):
        return
    wrapped = make(orig)
    wrapped.__wrapped__ = orig
    setattr(wrapped, mark, True)
    setattr(owner, attr, wrapped)


# -- the script's Keras ----------------------------------------------------------------


def keras_module():
    """The Keras module the script uses (its fits', else tf_keras if imported,
    else keras); None when not imported. Never imports one."""
    return sys.modules.get(S.keras_lib or ("tf_keras" if "tf_keras" in sys.modules else "keras"))


def keras2(keras) -> bool:
    """Keras 2 (tf_keras, TensorFlow <= 2.15's keras), not Keras 3."""
    return str(getattr(keras, "__version__", "3")).startswith("2.")


# -- the end ------------------------------------------------------------------------


def finish() -> None:
    """Write the result once: at a stop, at exit, after a crash."""
    with S.lock:
        if S.finished or os.getpid() != S.pid:
            return
        S.finished = True
    if S.budget is not None:
        S.budget.finish(S.extra)
    keras_side = _SIDES.get("keras")
    models = keras_side.user_models() if keras_side is not None else []
    for hook in S.end_hooks:
        _quietly("end hook", hook, models)
    weights_finite, bad = keras_side.check_weights() if keras_side is not None else (None, [])
    extra = dict(S.extra)
    extra["stop"] = S.stop_reason
    # what it ran on: the known costs of features on their hardware (devices.py)
    _quietly("hardware", lambda: extra.update(hardware=(_DEVICES or _sibling_file("devices")).hardware(S.extra)))
    if S.keras_lib:
        extra["keras"] = S.keras_lib
    if S.errors:
        extra["harness_errors"] = S.errors
    result = {
        "losses": [x if math.isfinite(x) else None for x in S.losses],
        "step_times": S.step_times,
        "first_nonfinite_step": S.first_nonfinite_step,
        "weights_finite": weights_finite,
        "nonfinite_weights": bad,
        "crashed": S.crashed,
        "error": S.error,
        "mode": S.mode,
        "steps_run": S.steps_seen,
        "tf_version": getattr(sys.modules.get("tensorflow"), "__version__", None),
        "keras_version": getattr(keras_module(), "__version__", None),
        "extra": extra,
    }
    if _MEMORY:  # the memory fields: peak RSS, RSS per step, growth, device peak
        _quietly("memory result", _MEMORY.merge_into, result)
    _quietly("data record", lambda: result.update(data=_DATA.to_dict() if _DATA else {}))
    if _DEVICES is not None:  # what actually ran: compile modes, replicas, policy, devices
        for k in ("compile_modes", "fits"):
            extra.pop(k, None)
        _quietly("devices summary", lambda: result.update(_DEVICES.summary(S.extra, keras_module())))
    _write_json(S.result_path, result, allow_nan=False, default=repr)


# -- how a trial ends when it is not our stop: a crash, a dead parent, a write outside ------


def _excepthook(orig, watch=None):
    """`orig` after recording an uncaught exception as the trial's crash
    (and, with a Landlock `watch`, naming the write outside the trial dir it
    may be: confine.py's Watch)."""

    def hook(tp, value, tb):
        if watch is not None:
            watch.exception(value)
        if not issubclass(tp, SystemExit):
            S.crashed = True
            # The error is "Type: first line of the message", the whole text kept when it has more:
            # TensorFlow's messages run over many lines with node names and paths; the first line
            # is the stable part to compare crashes by.
            S.error = text = "".join(traceback.format_exception_only(tp, value)).strip()
            if len(lines := [line for line in text.splitlines() if line.strip()]) > 1:
                S.error, S.extra["error_detail"] = lines[0].strip(), text[-4000:]
        if _FINDER is not None:  # without the first-import wrappers' frames (a cold process has none)
            tb = sys.modules["_tfrepro_harness_imports"].hide(value, tb)
        orig(tp, value, tb)

    return hook


# -- plugins ----------------------------------------------------------------------------


class PluginContext:
    """The config's `plugins` are .py paths; before the script runs, each is
    imported by path and `plugin.install(ctx)` is called, where `ctx` offers
      ctx.options              dict, the config's `plugin_options`
      ctx.record(key, value)   JSON-serializable; ends up in TrialResult.extra[key]
      ctx.add_fit_hook(fn)     fn(model, args, kwargs) just before each Model.fit
      ctx.add_end_hook(fn)     fn(models) at the end (also after a step-cap stop),
                               models = the Keras models created during the trial
      ctx.after_import(name, fn)  fn(module) right after the script imports the
                               top-level module `name` (e.g. "tensorflow")
      ctx.replicas(fits=True)  the most replicas in sync so far (devices.replicas)
      ctx.tf_settings()        op determinism, eager functions (devices.tf_settings)
    A plugin that raises is recorded in extra["harness_errors"]; it never fails
    the trial."""

    def __init__(self, options: dict) -> None:
        self.options = dict(options)
        self.add_fit_hook = S.fit_hooks.append
        self.add_end_hook = S.end_hooks.append
        # Or now if it is imported (in a warm child, where it was imported before the trial: at the
        # script's first import of it, as cold).
        self.after_import = _FINDER.add

    def record(self, key: str, value) -> None:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            value = repr(value)
        S.extra[key] = value

    def replicas(self, fits: bool = True) -> int | None:
        """None when unknown (devices.py did not load)."""
        return _DEVICES.replicas(S.extra, fits) if _DEVICES is not None else None

    def tf_settings(self) -> dict:
        """Those TensorFlow can report now; {} before it is imported."""
        tf = sys.modules.get("tensorflow")
        got = _DEVICES.tf_settings(tf) if _DEVICES is not None and tf is not None else {}
        return {k: v for k, v in got.items() if isinstance(v, bool)}


def activate(config_path: str) -> None:
    """Install everything; called once, from sitecustomize, before the script."""
    global S, FRAMES, _MEMORY, _FINDER, _DATA
    with open(config_path, encoding="utf-8") as f:
        S = _State(json.load(f))
    FRAMES = _side("data")  # also the walk over a batch's leaves (harness_keras.py, probes.py)
    if S.config.get("deterministic"):
        import random

        random.seed(int(S.config.get("seed", 0)))
    memory = _sibling_file("memory")  # also a timing trial's step budget
    if S.config.get("steps_max"):
        S.budget = memory.Budget(S.config)
    if os.getpgrp() == os.getpid():  # only when we lead our own group (as run_trial starts us)
        # Die with tfrepro: a SIGKILLed parent cannot kill our session itself, and an orphaned
        # trial would train on for nothing; killing our group takes grandchildren too (launch.py).
        _sibling_file("launch").watch_parent(os.getppid())
    # the sampler sets `[trial] memory_limit_mb` (RLIMIT_AS) before the script runs
    _MEMORY = _quietly("memory sampler", memory.start, S.config)
    watch = None  # Landlock: the first write outside the trial dir named (confine.py's Watch)
    if (spec := S.config.get("confine") or {}).get("mode") == "landlock" and spec.get("writable"):
        module = sys.modules.get("_tfrepro_confine") or _sibling_file("confine")
        watch = module.watch(spec, os.getcwd(), FRAMES.user_where)
    sys.excepthook = _excepthook(sys.excepthook, watch)
    atexit.register(finish)
    sys.stdout = StdoutTap(sys.stdout)  # custom loops: `step=N loss=X` lines
    _FINDER = _sibling_file("harness_imports").PostImportFinder(_HOOKS, note_error)
    sys.meta_path.insert(0, _FINDER)
    _FINDER.fire_imported()
    try:  # what the script feeds training (harness_data.py)
        _DATA = FRAMES.Recorder(note_error)
        FRAMES.install(_DATA, _FINDER)
        S.fit_hooks.append(_DATA.on_fit)
    except Exception:
        note_error("data recorder")
    for name in ("tensorflow", "keras", "tf_keras"):  # custom loops (harness_loop.py)
        on = "on_tensorflow" if name == "tensorflow" else "on_keras"  # Keras 3, Keras 2 or tf_keras
        _FINDER.add(name, lambda module, on=on: getattr(_side("loop"), on)(module))
    if S.config.get("plugins"):  # each imported by path, its `install(ctx)` called (PluginContext)
        ctx = PluginContext(S.config.get("plugin_options") or {})
        for i, path in enumerate(S.config["plugins"]):
            try:
                _load(f"_tfrepro_plugin_{i}", path).install(ctx)
            except Exception:
                note_error(f"plugin {path}")
