"""Harness plugin (loaded by path inside a trial process; stdlib +
TensorFlow only, never tfrepro): the trial runs under
`tf.debugging.enable_check_numerics()` with XLA forced off, for the report's
localization of a NaN (report/localize.py). See harness.py's `PluginContext`.

check_numerics does not work under XLA, so `jit_compile` is dropped from
`Model.compile` and `tf.function`, and `tf.config.optimizer.set_jit` becomes a
no-op; what the script asked for is recorded, not silently lost. A dynamic
loss scale starts at 1 (see `_scale_one`). Recorded under
TrialResult.extra["localize"]: {"error_type", "message", "traceback",
"layers", "settings", "completed"}.
"""

import contextlib
import inspect
import sys
import traceback


def _layers(models) -> list:
    """[name, class] of each layer of `models`, first seen first."""
    seen = {}
    for model in models:
        for layer in model._flatten_layers(include_self=False):
            seen.setdefault(layer.name, type(layer).__name__)
    return [[n, c] for n, c in seen.items()]


def _scale_one(orig, settings: dict):
    # Dynamic loss scaling starts at 2**15 and *expects* the first scaled
    # gradients to overflow (the optimizer skips those steps). Under
    # check_numerics that expected Inf would be reported as the culprit,
    # so the scale starts at 1 here: real overflows still show. A fixed
    # scale (Keras 2 / tf_keras `dynamic=False`) skips nothing: it is kept.
    # The arguments are bound by name: Keras 3 takes `(inner_optimizer,
    # initial_scale, ...)`, Keras 2 and tf_keras `(inner_optimizer, dynamic,
    # initial_scale, ...)`.
    signature = inspect.signature(orig)

    def init(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the optimizer's own error says it better
            return orig(self, *args, **kwargs)
        if "initial_scale" in signature.parameters and bound.arguments.get("dynamic", True):
            bound.arguments["initial_scale"] = 1.0
            settings["loss_scale_start"] = 1.0
        return orig(*bound.args, **bound.kwargs)

    return init


def _patch_keras(lib, facts: dict) -> None:
    """`Model.compile` without XLA (what it asked for recorded, its layers
    noted) and the loss-scale optimizer of a Keras the script imports (Keras
    3, Keras 2, tf_keras: each has `mixed_precision.LossScaleOptimizer`)."""
    label = "Model.compile" if lib.__name__ == "keras" else f"{lib.__name__}.Model.compile"
    settings = facts["settings"]
    with contextlib.suppress(Exception):
        orig = lib.Model.compile

        def compile(self, *args, **kwargs):
            jit = kwargs.get("jit_compile", "auto")
            if jit not in (False, None, "auto"):
                settings["jit_compile_requested"].append(f"{label}(jit_compile={jit!r})")
            kwargs["jit_compile"] = False
            with contextlib.suppress(Exception):
                facts["layers"] = _layers([self])
            return orig(self, *args, **kwargs)

        lib.Model.compile = compile
        # A dynamic loss scale starts at 1, in each class that builds one: the public class
        # and, in Keras 2 and tf_keras, the `LossScaleOptimizer` / `LossScaleOptimizerV3`
        # its metaclass builds instead of itself.
        cls = lib.mixed_precision.LossScaleOptimizer
        for klass in (cls, *cls.__subclasses__()):
            if "__init__" in vars(klass):
                klass.__init__ = _scale_one(klass.__init__, settings)


def install(ctx):
    facts = {
        "completed": True,
        "error_type": None,
        "message": None,
        "layers": [],
        "settings": {"jit_compile_requested": [], "replicas": None},
    }
    settings = facts["settings"]

    def on_tensorflow(tf):  # `tf.function(jit_compile=...)` and `set_jit(True)` recorded, XLA kept off
        orig_function = tf.function
        orig_set_jit = tf.config.optimizer.set_jit

        def function(*args, **kwargs):
            if kwargs.pop("jit_compile", None):
                settings["jit_compile_requested"].append("tf.function")
            return orig_function(*args, **kwargs)

        def set_jit(enabled):
            if enabled:
                settings["jit_compile_requested"].append("tf.config.optimizer.set_jit")
            return orig_set_jit(False)

        tf.function = function
        tf.config.optimizer.set_jit = set_jit
        tf.debugging.enable_check_numerics()

    ctx.after_import("tensorflow", on_tensorflow)
    for name in ("keras", "tf_keras"):  # whichever the script imports, when it does
        ctx.after_import(name, lambda lib: _patch_keras(lib, facts))
    before = sys.excepthook

    def excepthook(tp, value, tb):  # the error is the finding
        facts.update(completed=False, error_type=tp.__name__, message=str(value))
        facts["traceback"] = "".join(traceback.format_exception(tp, value, tb))[-20000:]
        before(tp, value, tb)

    sys.excepthook = excepthook

    def on_end(models):
        # What the script set up, read once it ran: the layers of a never-compiled model (custom loop:
        # of the models the trial created), op determinism, eager functions, the replicas of a strategy
        # the script built (the precision policy is the trial's own field: report/localize.py).
        if not facts["layers"]:
            with contextlib.suppress(Exception):
                facts["layers"] = _layers(models)
        settings.update(ctx.tf_settings(), replicas=ctx.replicas(fits=False))
        ctx.record("localize", facts)

    ctx.add_end_hook(on_end)
