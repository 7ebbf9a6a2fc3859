"""Harness plugin (loaded by path inside a trial process; stdlib + TensorFlow
only): records the training setup the script actually ran with, for the
report's re-run of the exported repro. See `harness_plugins.py`.

Recorded under TrialResult.extra["setup"]: precision policy, replicas of each
model's strategy, the resolved `jit_compile` of each model, eager execution;
with the option `environment`, under extra["environment"] the facts of
`envprobe.describe()` (versions, build info, devices) of this very process.
Op determinism is not recorded: the harness itself turns it on for
deterministic trials, so it would describe tfrepro, not the script.
"""

import contextlib
import sys


def install(ctx):
    fit_facts = {}

    def on_fit(model, args, kwargs):
        fit_facts["jit_compile"] = bool(ctx.jit_compile(model))
        with contextlib.suppress(Exception):
            fit_facts["strategy"] = type(model.distribute_strategy).__name__

    def on_end(models):
        setup = dict(fit_facts)
        if (replicas := ctx.replicas()) is not None:
            setup["replicas"] = replicas
        if (policy := ctx.precision_policy()) is not None:
            setup["precision_policy"] = policy
        tf = sys.modules.get("tensorflow")
        with contextlib.suppress(Exception):
            if "run_functions_eagerly" in (tf_settings := ctx.tf_settings()):
                setup["run_functions_eagerly"] = tf_settings["run_functions_eagerly"]
            if tf is not None:
                setup["logical_devices"] = len(tf.config.list_logical_devices("CPU")) + len(
                    tf.config.list_logical_devices("GPU")
                )
        ctx.record("setup", setup)
        if ctx.options.get("environment"):
            try:
                envprobe = sys.modules["_tfrepro_harness"]._sibling_file("envprobe")  # loaded by path
                ctx.record("environment", envprobe.describe()[0])
            except Exception as e:
                ctx.record("environment", {"probe_error": f"{type(e).__name__}: {e}"})

    ctx.add_fit_hook(on_fit)
    ctx.add_end_hook(on_end)
