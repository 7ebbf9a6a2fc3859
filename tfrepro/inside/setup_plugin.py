"""Harness plugin (loaded by path inside a trial process; stdlib + TensorFlow
only): records what the script set up that no trial field holds, for the
report's re-run of the exported repro. See harness.py's `PluginContext`.

Every trial already states the precision policy, the replicas in sync, each
compile/fit's resolved `jit_compile` and, in `extra["strategies"]`, the
strategies the script built (inside/devices.py). This plugin adds, under
TrialResult.extra["setup"], whether `tf.function`s ran eagerly; with the
option `environment`, under extra["environment"] the facts of
`envprobe.describe()` (versions, build info, devices) of this very process.
Op determinism is not recorded: the harness itself turns it on for
deterministic trials, so it would describe tfrepro, not the script.
"""

import sys


def install(ctx):
    def on_end(models):
        if "run_functions_eagerly" in (tf_settings := ctx.tf_settings()):
            ctx.record("setup", {"run_functions_eagerly": tf_settings["run_functions_eagerly"]})
        if ctx.options.get("environment"):
            try:
                envprobe = sys.modules["_tfrepro_harness"]._sibling_file("envprobe")  # loaded by path
                ctx.record("environment", envprobe.describe()[0])
            except Exception as e:
                ctx.record("environment", {"probe_error": f"{type(e).__name__}: {e}"})

    ctx.add_end_hook(on_end)
