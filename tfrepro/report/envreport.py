"""The environment a bug report states (versions, build, devices), and
`tfrepro env`: versions, devices, precision policy, XLA and determinism
settings and the relevant environment variables, as one JSON-able document
and as text lines.

TensorFlow is imported only in a child process, so the CLI process stays
light and a broken TensorFlow install still gives a report that says so.
When the report re-ran the repro, the re-run's own process already
described itself (`inside/envprobe.py`, `install`) and no extra child is needed;
without a re-run, `in_trial` runs a trial of a script that only imports
TensorFlow with that plugin (the trial spawner: launcher, confinement, time
limit). `collect` runs `inside/envprobe.py` (`--runtime`: with the runtime
settings) as a child of its own for `tfrepro env`, which must still tell
what is there on a machine where no trial can run (no confinement, a broken
install). `tfrepro env`'s variables come from this process's environment,
allow-listed and redacted by `scrub.py`'s rules, and every string passes
the scrubber (the home directory shows as `~`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfrepro import __version__
from tfrepro.catalog import XLA_VARS
from tfrepro.inside import ENV_PROBE
from tfrepro.report import scrub
from tfrepro.report.answer import Env

# Variables named by their own section (XLA, determinism) as well as listed.
DETERMINISM_VARS = ("TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", "PYTHONHASHSEED")


def env_doc(facts: Env, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The document `tfrepro env --json` prints, from the probe's facts."""
    environ = os.environ if environ is None else environ
    scrubber = scrub.Scrubber.from_environ(environ)
    # TF_*, KERAS_*, CUDA_*, XLA_* (scrub.py's allow-list: DETERMINISM_VARS in it), sorted; secret-looking redacted
    names = {n for n in environ if scrub.is_allowed_env(n) or n.startswith("CUDA_")}
    variables = scrub.capture_env(environ, scrubber, names)
    runtime = facts.runtime or {}
    doc: dict[str, Any] = {
        "versions": {
            "tfrepro": __version__,
            "python": facts.python,
            "tensorflow": facts.tensorflow,
            "keras": facts.keras,
            "tf_keras": (facts.tf_keras_dist or {}).get("version"),
            "numpy": (facts.numpy_dist or {}).get("version"),
        },
        "tf_dist": (facts.tf_dist or {}).get("name"),
        "os": facts.os,
        "devices": facts.devices or [],
        "gpus": facts.gpus or [],
        "nvidia_driver": facts.nvidia_driver,
        "precision_policy": runtime.get("precision_policy"),
        "xla": {"jit": runtime.get("xla_jit"), **{n: variables.get(n) for n in XLA_VARS}},
        "determinism": {
            "op_determinism": runtime.get("op_determinism"),
            "tensor_float_32": runtime.get("tensor_float_32"),
            **{n: variables.get(n) for n in DETERMINISM_VARS},
        },
        "env": variables,
        "withheld_env": scrub.withheld_count(environ),
    }
    doc.update(
        {key: error for key, error in (("tf_error", facts.tf_error), ("probe_error", facts.probe_error)) if error}
    )
    return scrubber.scrub_obj(doc)  # type: ignore[return-value]


def _unset(value: object) -> str:
    return "(unset)" if value is None else str(value)


def env_lines(doc: dict[str, Any]) -> list[str]:
    """`tfrepro env` as text."""
    v = doc["versions"]
    # each version by its key in env_doc, not by its position
    labels = {
        "tfrepro": "tfrepro",
        "python": "Python",
        "tensorflow": "TensorFlow",
        "keras": "Keras",
        "tf_keras": "tf_keras",
        "numpy": "NumPy",
    }
    lines = [f"{name:<11} {v[k] if v[k] is not None else '(not installed)'}" for k, name in labels.items()]
    lines += [f"error: {doc[key]}" for key in ("tf_error", "probe_error") if doc.get(key)]
    devices = ", ".join(f"{d['name']} ({d['type']})" for d in doc["devices"]) or "(none seen)"
    lines.append(f"devices     {devices}")
    lines.extend(f"  GPU {g.get('name')} (compute {g.get('compute_capability') or '?'})" for g in doc["gpus"])
    lines.append(f"precision   {_unset(doc['precision_policy'])}")
    x = doc["xla"]
    lines.append(f"XLA         tf.config jit {_unset(x['jit'])}; " + "; ".join(f"{n}={_unset(x[n])}" for n in XLA_VARS))
    d = doc["determinism"]
    lines.append(
        f"determinism op determinism {_unset(d['op_determinism'])}; TF32 {_unset(d['tensor_float_32'])}; "
        + "; ".join(f"{n}={_unset(d[n])}" for n in DETERMINISM_VARS)
    )
    lines.append("environment" + ("" if doc["env"] else "  (no TF_*, KERAS_*, CUDA_*, XLA_* variable set)"))
    lines.extend(f"  {k}={val}" for k, val in doc["env"].items())
    if doc["withheld_env"]:
        lines.append(f"  ({doc['withheld_env']} secret-looking variables elsewhere in the environment not shown)")
    return lines


# The script of the environment trial: TensorFlow and Keras imported, nothing run.
ENV_SCRIPT = "import tensorflow\nimport keras\n"


def in_trial(*, python: str | None = None, timeout_s: float = 180.0) -> dict[str, Any]:
    """Facts about the TensorFlow installation `python` runs, from inside a
    trial (`inside/envprobe.py`'s `install`, `environment`). Never raises for a
    failing trial: the facts then carry `probe_error`."""
    from tfrepro.report.rerun import default_runner, write_files
    from tfrepro.settings import TrialSettings

    with tempfile.TemporaryDirectory(prefix="tfrepro-env-") as tmp:
        root = write_files(Path(tmp) / "env", {"repro.py": ENV_SCRIPT})
        run = default_runner(Path(tmp) / "state", python=python, label="environment", cold=True)
        got = run(root, TrialSettings(timeout_s=timeout_s, deterministic=False))
    facts = got.extra.get("environment")
    if isinstance(facts, dict):
        return facts
    if got.timed_out:
        return {"probe_error": f"environment probe timed out after {timeout_s:.0f} s"}
    return {"probe_error": f"environment probe failed (exit {got.exit_code}): {got.error or 'no output'}"}


def collect(*, python: str | None = None, timeout_s: float = 180.0, runtime: bool = False) -> dict[str, Any]:
    """Facts about the TensorFlow installation `python` runs (see
    `inside/envprobe.py`; `runtime` adds the runtime settings).
    Never raises for a failing child: the facts then carry `probe_error`."""
    from tfrepro.trials.confine import detect
    from tfrepro.trials.procs import confined, run_probe

    with tempfile.TemporaryDirectory(prefix="tfrepro-env-") as tmp:
        out = Path(tmp) / "env.json"
        cmd = [python or sys.executable, str(ENV_PROBE), str(out), *(["--runtime"] if runtime else [])]
        # Confined to `tmp` where a mechanism works; where none does it runs as is (it is
        # tfrepro's code: `tfrepro env` must still tell what is there, the missing confinement included).
        cmd = confined(cmd, Path(tmp)) if detect().mode != "none" else cmd
        # quiet logs, and no path that would make tfrepro importable (what it probes must stand on its own)
        env = {"TF_CPP_MIN_LOG_LEVEL": "2"} | {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = run_probe(cmd, Path(tmp), env, timeout_s)
        if done is None:
            return {"probe_error": f"environment probe timed out after {timeout_s:.0f} s"}
        if not out.exists():
            tail = done[1].strip().splitlines()[-1:] or ["no output"]
            return {"probe_error": f"environment probe failed (exit {done[0]}): {tail[0]}"}
        return json.loads(out.read_text(encoding="utf-8"))
