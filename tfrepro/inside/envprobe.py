"""Describes the machine's TensorFlow installation (stdlib + TensorFlow only,
never imports tfrepro). Two ways in:

    python envprobe.py OUT.json [--runtime]
                                      a child of its own (`envreport.collect`);
                                      `--runtime` adds the runtime settings
                                      `tfrepro env` states (`runtime`)
    install(ctx)                      the harness plugin (`SETUP_PLUGIN`, harness.py's
                                      `PluginContext`) of the report's re-run and of
                                      `envreport.in_trial`: at the end, under
                                      TrialResult.extra["setup"], whether
                                      `tf.function`s ran eagerly; with the option
                                      `environment`, under extra["environment"],
                                      `describe()` of this very process

The rest of what the script set up is the trial's own fields (the precision
policy, the replicas in sync, each compile/fit's resolved `jit_compile`, the
strategies in extra["strategies"]: inside/devices.py). Op determinism is not
recorded: the harness itself turns it on for deterministic trials, so it
would describe tfrepro, not the script.
"""

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

# The distributions that install the `tensorflow` package, in the order a
# version is looked up when several are installed (tfrepro.dists reads it).
TF_DISTS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tf-nightly",
    "tf-nightly-cpu",
    "tensorflow-macos",
    "tensorflow-intel",
    "intel-tensorflow",
)


def _dist(name):
    """Version and install source of an installed distribution, or None."""
    try:
        d = metadata.distribution(name)
    except Exception:
        return None
    source = "pip (binary wheel)"
    with contextlib.suppress(Exception):
        installer = (d.read_text("INSTALLER") or "").strip()
        if installer and installer != "pip":
            source = f"{installer} (binary wheel)"
        direct = d.read_text("direct_url.json")
        if direct:
            info = json.loads(direct)
            if info.get("dir_info", {}).get("editable"):
                source = "source (editable install)"
            elif "vcs_info" in info or info.get("url", "").startswith("file:"):
                source = "source"
    if "conda-meta" in str(getattr(d, "_path", "")):
        source = "conda"
    return {"name": name, "version": d.version, "source": source}


def _nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except Exception:
        return []
    rows = [[p.strip() for p in line.split(",")] for line in out.splitlines()]
    return [{"name": r[0], "memory": r[1], "driver": r[2]} for r in rows if len(r) >= 3]


def tf_gpus(tf) -> list:
    """Each GPU TensorFlow sees: its name (the device's own, else TensorFlow's)
    and compute capability. Also `tfrepro check`'s GPU names (probes.py)."""
    gpus = []
    for d in tf.config.list_physical_devices("GPU"):
        try:
            det = tf.config.experimental.get_device_details(d)
        except Exception:
            det = {}
        cc = det.get("compute_capability")
        gpus.append(
            {"name": det.get("device_name") or d.name, "compute_capability": ".".join(map(str, cc)) if cc else None}
        )
    return gpus


def build_info(tf) -> dict:
    """`tf.sysconfig.get_build_info()` as JSON (lists of str; other
    non-scalars str); raises where TensorFlow cannot say. Also probes.py's."""
    scalar = (bool, int, float, str, type(None))
    return {
        k: [str(x) for x in v] if isinstance(v, (list, tuple)) else v if isinstance(v, scalar) else str(v)
        for k, v in dict(tf.sysconfig.get_build_info()).items()
    }


def describe():
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        os_name = None
    facts = {
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "os": os_name or platform.platform(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    tf_dist = next(filter(None, map(_dist, TF_DISTS)), None)  # the first installed
    if tf_dist:
        facts["tf_dist"] = tf_dist
    try:  # CUDA/cuDNN libraries installed as pip wheels (nvidia-cudnn-cu12, ...)
        names = {(d.metadata["Name"] or "").lower(): d.version for d in metadata.distributions()}
    except Exception:
        names = {}
    facts["cuda_wheels"] = {n: v for n, v in sorted(names.items()) if n.startswith("nvidia-")}
    for name in ("keras", "tf_keras", "numpy"):
        if d := _dist(name):
            facts[f"{name}_dist"] = d
    try:
        import tensorflow as tf
    except Exception as e:  # the report still says what it could
        facts["tf_error"] = f"{type(e).__name__}: {e}"
        return facts, None
    facts["tf_version"] = tf.__version__
    facts["tf_git_version"] = getattr(tf.version, "GIT_VERSION", None)
    try:
        facts["build_info"] = build_info(tf)
    except Exception as e:
        facts["build_info"] = {"error": str(e)}
    try:
        import keras

        facts["keras_version"] = keras.__version__
    except Exception as e:
        facts["keras_version"] = None
        facts["keras_error"] = str(e)
    devices = tf.config.list_physical_devices()
    facts["devices"] = [{"name": d.name, "type": d.device_type} for d in devices]
    gpus = tf_gpus(tf)
    if smi := _nvidia_smi():  # the driver is worth stating even when TensorFlow sees no GPU
        facts["nvidia_driver"] = smi[0]["driver"]
        facts["smi_gpus"] = smi
    for g, s in zip(gpus, smi):
        g["memory"], g["driver"] = s["memory"], s["driver"]
    facts["gpus"] = gpus
    return facts, tf


def _tf_keras(tf):
    """The Keras a script's `tf.keras` is, loaded: tf_keras where
    TF_USE_LEGACY_KERAS=1 asks for it, else Keras 3 (never a second one).
    `tf.keras` is a lazy loader: the first attribute read imports it, and
    raises where it cannot."""
    keras = tf.keras
    getattr(keras, "mixed_precision")
    return keras


def runtime(tf):
    """The settings a fresh process starts with (what a trial starts from):
    the precision policy (of the Keras `tf.keras` is), XLA auto-clustering,
    op determinism, TF32, read as a trial reads them (devices.py, the
    sibling file, loaded by path)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import devices

    out = {"precision_policy": devices.read(lambda: devices.precision_policy(_tf_keras(tf)))}
    out["xla_jit"] = devices.read(lambda: tf.config.optimizer.get_jit() or "off")
    out["op_determinism"] = devices.tf_settings(tf)["op_determinism"]
    out["tensor_float_32"] = devices.read(lambda: tf.config.experimental.tensor_float_32_execution_enabled())
    return out


def install(ctx):
    """The re-run's plugin (see the module docstring)."""

    def on_end(models):
        if "run_functions_eagerly" in (tf_settings := ctx.tf_settings()):
            ctx.record("setup", {"run_functions_eagerly": tf_settings["run_functions_eagerly"]})
        if ctx.options.get("environment"):
            try:
                ctx.record("environment", describe()[0])
            except Exception as e:
                ctx.record("environment", {"probe_error": f"{type(e).__name__}: {e}"})

    ctx.add_end_hook(on_end)


def main():
    """The facts written to sys.argv[1]; with `--runtime`, the settings a
    fresh process starts with too."""
    facts, tf = describe()
    if "--runtime" in sys.argv[2:] and tf is not None:
        facts["runtime"] = runtime(tf)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(facts, f, indent=1)


if __name__ == "__main__":
    main()
