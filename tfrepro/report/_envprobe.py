"""Runs in a child process (stdlib + TensorFlow only, executed by path; never
imports tfrepro): describes the machine's TensorFlow installation and, on
request, writes TensorBoard event files.

    python _envprobe.py OUT.json [EVENTS_SPEC.json]

OUT.json receives the facts. EVENTS_SPEC.json, when given, is
{"logdir": str, "runs": [{"name": str, "losses": [float|null], "step_times": [...]}]};
each run becomes a subdirectory of logdir with `loss` and `step_time_ms`
scalars. `tf.summary.scalar` needs the tensorboard package, so the scalars are
written with `tf.summary.write` and the metadata the scalars plugin reads.
"""

import json
import os
import platform
import shutil
import subprocess
import sys


def _os_release():
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def _dist(name):
    """Version and install source of an installed distribution, or None."""
    try:
        from importlib import metadata

        d = metadata.distribution(name)
    except Exception:
        return None
    source = "pip (binary wheel)"
    try:
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
    except Exception:
        pass
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
            capture_output=True, text=True, timeout=20,
        ).stdout
    except Exception:
        return []
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return gpus


def describe():
    facts = {
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "os": _os_release() or platform.platform(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    for name in ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos", "intel-tensorflow"):
        d = _dist(name)
        if d:
            facts["tf_dist"] = d
            break
    for name, key in (("keras", "keras_dist"), ("tf_keras", "tf_keras_dist"), ("numpy", "numpy_dist")):
        d = _dist(name)
        if d:
            facts[key] = d
    try:
        import tensorflow as tf
    except Exception as e:  # the report still says what it could
        facts["tf_error"] = f"{type(e).__name__}: {e}"
        return facts, None
    facts["tf_version"] = tf.__version__
    facts["tf_git_version"] = getattr(tf.version, "GIT_VERSION", None)
    try:
        facts["build_info"] = {k: (list(v) if isinstance(v, (list, tuple)) else v)
                               for k, v in tf.sysconfig.get_build_info().items()}
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
    gpus = []
    for d in tf.config.list_physical_devices("GPU"):
        try:
            det = tf.config.experimental.get_device_details(d)
        except Exception:
            det = {}
        cc = det.get("compute_capability")
        gpus.append({"name": det.get("device_name", d.name),
                     "compute_capability": ".".join(map(str, cc)) if cc else None})
    smi = _nvidia_smi()
    for i, g in enumerate(gpus):
        if i < len(smi):
            g["memory"] = smi[i]["memory"]
            g["driver"] = smi[i]["driver"]
    facts["gpus"] = gpus
    return facts, tf


def write_events(tf, spec):
    from tensorflow.core.framework import summary_pb2

    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )
    written = []
    for run in spec["runs"]:
        logdir = os.path.join(spec["logdir"], run["name"])
        writer = tf.summary.create_file_writer(logdir)
        with writer.as_default():
            for i, loss in enumerate(run.get("losses") or []):
                # NaN is what TensorBoard should show at the step it happened.
                value = float("nan") if loss is None else float(loss)
                tf.summary.write("loss", tf.constant(value, tf.float32), step=i + 1, metadata=meta)
            for i, t in enumerate(run.get("step_times") or []):
                tf.summary.write("step_time_ms", tf.constant(1000.0 * t, tf.float32), step=i + 1,
                                 metadata=meta)
        writer.flush()
        writer.close()
        written.append(run["name"])
    return written


def main():
    out = sys.argv[1]
    facts, tf = describe()
    if len(sys.argv) > 2 and tf is not None:
        with open(sys.argv[2], encoding="utf-8") as f:
            spec = json.load(f)
        try:
            facts["events_written"] = write_events(tf, spec)
        except Exception as e:
            facts["events_error"] = f"{type(e).__name__}: {e}"
    with open(out, "w", encoding="utf-8") as f:
        json.dump(facts, f, indent=1)


if __name__ == "__main__":
    main()
