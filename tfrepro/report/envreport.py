"""`tfrepro env`: versions, devices, precision policy, XLA and determinism
settings and the relevant environment variables, as one value (`EnvReport`)
printed as JSON or as text lines.

TensorFlow is imported only in a child (`inside/runtimeprobe.py`, through
`environment.collect`); the variables come from this process's environment,
allow-listed and redacted by `scrub.py`'s rules, and every string passes
the scrubber (the home directory shows as `~`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tfrepro import __version__
from tfrepro.report import scrub
from tfrepro.report.answer import Env, of

# Variables named by their own section (XLA, determinism) as well as listed.
XLA_VARS = ("TF_XLA_FLAGS", "XLA_FLAGS")
DETERMINISM_VARS = ("TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", "PYTHONHASHSEED")
_PACKAGES = ("tfrepro", "python", "tensorflow", "keras", "tf_keras", "numpy")


@dataclass(frozen=True)
class EnvReport:
    """What `tfrepro env` says: `--json` prints `json()`, the text is
    `env_lines`. Every string passed the scrubber (`env_doc`) but
    `confinement`, which the CLI adds (trials/confine.py)."""

    versions: dict[str, str | None] = field(default_factory=dict)  # the _PACKAGES, None: not installed
    tf_dist: str | None = None  # the distribution TensorFlow came in (tensorflow, tf-nightly, ...)
    os: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    nvidia_driver: str | None = None
    precision_policy: str | None = None
    xla: dict[str, Any] = field(default_factory=dict)  # tf.config's jit, the XLA_VARS
    determinism: dict[str, Any] = field(default_factory=dict)  # op determinism, TF32, the DETERMINISM_VARS
    env: dict[str, str] = field(default_factory=dict)  # the variables listed, sorted
    withheld_env: int = 0  # how many secret-looking variables elsewhere, never their names
    tf_error: str | None = None
    probe_error: str | None = None
    confinement: dict[str, str] | None = None

    def json(self) -> dict[str, Any]:
        """The document `--json` prints: `tf_error`, `probe_error`, `confinement` only when set."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in _WHEN_SET}


_WHEN_SET = ("tf_error", "probe_error", "confinement")


def env_doc(facts: Env, environ: Mapping[str, str] | None = None) -> EnvReport:
    """What `tfrepro env` says, from the probe's facts."""
    environ = os.environ if environ is None else environ
    scrubber = scrub.Scrubber.from_environ(environ)
    # TF_*, KERAS_*, CUDA_*, XLA_* (and scrub.py's allow-list), sorted; a secret-looking name or value redacted
    names = {n for n in environ if scrub.is_allowed_env(n) or n.startswith("CUDA_")}
    variables = scrub.capture_env(environ, scrubber, names | {n for n in DETERMINISM_VARS if n in environ})
    runtime = facts.runtime or {}
    doc = EnvReport(
        versions={
            "tfrepro": __version__,
            "python": facts.python,
            "tensorflow": facts.tensorflow,
            "keras": facts.keras,
            "tf_keras": (facts.tf_keras_dist or {}).get("version"),
            "numpy": (facts.numpy_dist or {}).get("version"),
        },
        tf_dist=(facts.tf_dist or {}).get("name"),
        os=facts.os,
        devices=facts.devices or [],
        gpus=facts.gpus or [],
        nvidia_driver=facts.nvidia_driver,
        precision_policy=runtime.get("precision_policy"),
        xla={"jit": runtime.get("xla_jit"), **{n: variables.get(n) for n in XLA_VARS}},
        determinism={
            "op_determinism": runtime.get("op_determinism"),
            "tensor_float_32": runtime.get("tensor_float_32"),
            **{n: variables.get(n) for n in DETERMINISM_VARS},
        },
        env=variables,
        withheld_env=scrub.withheld_count(environ),
        tf_error=facts.tf_error or None,
        probe_error=facts.probe_error or None,
    )
    return of(EnvReport, scrubber.scrub_obj(doc.json())) or EnvReport()  # type: ignore[arg-type]


def _unset(value: object) -> str:
    return "(unset)" if value is None else str(value)


def env_lines(doc: EnvReport) -> list[str]:
    """`tfrepro env` as text."""
    v = doc.versions
    names = zip(("tfrepro", "Python", "TensorFlow", "Keras", "tf_keras", "NumPy"), _PACKAGES)
    lines = [f"{name:<11} {v[key] if v[key] is not None else '(not installed)'}" for name, key in names]
    lines += [f"error: {error}" for error in (doc.tf_error, doc.probe_error) if error]
    devices = ", ".join(f"{d['name']} ({d['type']})" for d in doc.devices) or "(none seen)"
    lines.append(f"devices     {devices}")
    lines.extend(f"  GPU {g.get('name')} (compute {g.get('compute_capability') or '?'})" for g in doc.gpus)
    lines.append(f"precision   {_unset(doc.precision_policy)}")
    x = doc.xla
    lines.append(f"XLA         tf.config jit {_unset(x['jit'])}; " + "; ".join(f"{n}={_unset(x[n])}" for n in XLA_VARS))
    d = doc.determinism
    lines.append(
        f"determinism op determinism {_unset(d['op_determinism'])}; TF32 {_unset(d['tensor_float_32'])}; "
        + "; ".join(f"{n}={_unset(d[n])}" for n in DETERMINISM_VARS)
    )
    lines.append("environment" + ("" if doc.env else "  (no TF_*, KERAS_*, CUDA_*, XLA_* variable set)"))
    lines.extend(f"  {k}={val}" for k, val in doc.env.items())
    if doc.withheld_env:
        lines.append(f"  ({doc.withheld_env} secret-looking variables elsewhere in the environment not shown)")
    return lines


def collect_env(python: str | None = None) -> EnvReport:
    """Probe the installation in a child process and build the document."""
    from tfrepro.inside import RUNTIME_PROBE
    from tfrepro.report import environment

    return env_doc(of(Env, environment.collect(python=python, probe=RUNTIME_PROBE)) or Env())
