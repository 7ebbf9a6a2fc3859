"""What the exported repro sets up, read from its source (pure).

The issue form asks nothing about the training setup, yet precision policy,
replica count, XLA, determinism and eager execution decide most numerics and
performance bugs. A static read of the script answers for every symptom at no
cost; when the report's re-run or the NaN localisation ran the script, the
facts they recorded take precedence (`merge_runtime`).

It is not zero-edit detection's reading (`annotate/`): detection finds what
it can switch off, one feature per statement, and skips the rest (a strategy
in a `with` header, run_eagerly beside jit_compile in one compile call),
while the setup says what the script sets; determinism and logical devices
are no feature at all. The names both know, the strategy classes and the
precision-policy setters, are the catalog's.
"""

from __future__ import annotations

import ast
import re
import sys
from contextlib import suppress
from dataclasses import dataclass, replace

from tfrepro import catalog
from tfrepro.report.records import RuntimeSettings
from tfrepro.trials.values import TrialResult

_CALL_STR = re.compile(r"""([\w.]+)\(\s*["'](\w+)["']""")
_JIT_TRUE = re.compile(r"jit_compile\s*=\s*True")
_SET_JIT = re.compile(r"optimizer\.set_jit\(\s*(True|[\"']autoclustering[\"'])")
_AUTO = "tf.config.optimizer.set_jit (auto-clustering)"
_EAGERLY = "tf.config.run_functions_eagerly(True)"
_STRATEGY = re.compile(rf"\b({'|'.join(catalog.STRATEGIES)})\s*\(")
_LOGICAL_RANGE = re.compile(r"LogicalDeviceConfiguration\([^)]*\)\s*(?:\]\s*\*\s*(\d+)|for\s+_\s+in\s+range\((\d+)\))")
_DETERMINISM = re.compile(r"enable_op_determinism\(\s*\)")
_EAGER = re.compile(r"run_functions_eagerly\(\s*True\s*\)")
_RUN_EAGERLY = re.compile(r"run_eagerly\s*=\s*True")
# tf_keras (Keras 2) turned on: the environment switch set (not after a `#`), or `import tf_keras` /
# `from tf_keras import ...` as a statement at a line's start (the words in a comment or a string do
# not count). The one rule of the setup's keras_flavour and of issue.route's reading of the culprit's diff.
LEGACY_KERAS = re.compile(
    r"""^[^#\n]*TF_USE_LEGACY_KERAS["']\]\s*=\s*["'](1|true|True)["']|^\s*(import|from)\s+tf_keras\b""", re.M
)
_CODE = re.compile(r"^[^#\n]*", re.M)


@dataclass(frozen=True)
class Setup:
    """report.json's `setup`: each field says what the script sets, in words
    (the defaults: what ISSUE.md says where a document lacks one)."""

    precision_policy: str = "unknown"
    xla: str = "unknown"
    distribution: str = "unknown"
    replicas: str = "?"
    determinism: str = "unknown"
    eager: str = "unknown"
    keras_flavour: str = ""


def scan_setup(source: str) -> Setup:
    code = "\n".join(m.group(0) for m in _CODE.finditer(source))  # comments dropped: a commented-out line never counts
    calls = [(m[1], m[2]) for m in _CALL_STR.finditer(code)]  # (the dotted name called, its literal first argument)
    policy = next((v for f, v in calls if catalog.sets_policy(f)), None)  # the setter's, else a Policy object's
    policy = policy or next((v for f, v in calls if f.endswith("mixed_precision.Policy")), None)
    xla = [w for rx, w in ((_JIT_TRUE, "jit_compile=True"), (_SET_JIT, _AUTO)) if rx.search(code)]
    eager = [w for rx, w in ((_EAGER, _EAGERLY), (_RUN_EAGERLY, "run_eagerly=True")) if rx.search(code)]
    strategies = sorted(set(_STRATEGY.findall(code)))
    n = None
    if r := _LOGICAL_RANGE.search(code):
        n = int(r.group(1) or r.group(2))
    elif "set_logical_device_configuration(" in code:
        n = code.count("LogicalDeviceConfiguration(") or None
    return Setup(
        precision_policy=policy or "float32 (Keras default)",
        xla=", ".join(xla) if xla else "off (no jit_compile=True, no auto-clustering)",
        distribution=", ".join(strategies) if strategies else "none (default strategy)",
        replicas=(f"{n} (logical devices)" if n else "one per visible device") if strategies else "1",
        determinism="tf.config.experimental.enable_op_determinism() in the script"
        if _DETERMINISM.search(code)
        else "not set by the script",
        eager=", ".join(eager) if eager else "off (graph mode)",
        keras_flavour="tf_keras (Keras 2, TF_USE_LEGACY_KERAS)" if LEGACY_KERAS.search(code) else "keras (Keras 3)",
    )


def merge_runtime(setup: Setup, rerun: TrialResult | None, localized: RuntimeSettings | None) -> Setup:
    """report.json's `setup`: facts recorded while the script ran override the
    static read where they are known: the re-run's trial (the fields every
    trial has, inside/devices.py; eager functions: `extra["setup"]`,
    inside/setup_plugin.py), then the NaN localisation's settings
    (inside/localize_plugin.py), by one rule (`_observed`)."""
    if rerun is not None:
        fits = [m for m in rerun.compile_modes if str(m.get("call")).startswith("fit#")]
        jit = fits[-1].get("jit_compile") if fits else None  # the last fit's resolved jit_compile
        ran = RuntimeSettings(
            precision_policy=rerun.precision_policy,
            replicas=rerun.replicas_in_sync,
            jit_compile_requested=["jit_compile=True in Model.fit"] if jit else [],
            run_functions_eagerly=(rerun.extra.get("setup") or {}).get("run_functions_eagerly"),
        )
        out = _observed(ran)
        if jit is False:  # the re-run's model did not compile with XLA
            out["xla"] = setup.xla + "; model.jit_compile False at run time"
        if strategies := [s["strategy"] for s in rerun.extra.get("strategies") or []]:  # the default one aside
            out["distribution"] = ", ".join(dict.fromkeys(strategies))
        setup = replace(setup, **out)
    return replace(setup, **_observed(localized or RuntimeSettings()))


def _observed(seen: RuntimeSettings) -> dict[str, str]:
    """The Setup fields `seen` knows, each marked as observed at run time."""
    out = {
        "precision_policy": seen.get("precision_policy") or None,
        "replicas": seen.get("replicas"),
        "xla": ", ".join(seen.get("jit_compile_requested") or ()) or None,
        "determinism": "op determinism enabled" if seen.get("op_determinism") is True else None,
        "eager": _EAGERLY if seen.get("run_functions_eagerly") is True else None,
    }
    return {k: f"{v} (observed at run time)" for k, v in out.items() if v is not None}


# What a TensorFlow bug report may assume is installed.
_ALLOWED_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "numpy"})


def extra_imports(files: dict[str, str]) -> list[str]:
    """Top-level packages the exported scripts import beyond the standard
    library, TensorFlow/Keras, NumPy and the bundle's own modules (sorted).
    A repro for the issue tracker should need none; `tfrepro` least of all."""
    local = {rel[:-3].replace("/", ".").split(".")[0] for rel in files if rel.endswith(".py")}
    nodes: list[ast.AST] = []
    for text in files.values():
        with suppress(SyntaxError):
            nodes += ast.walk(ast.parse(text))
    found = {a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
    found |= {n.module.split(".")[0] for n in nodes if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
    return sorted(found - sys.stdlib_module_names - _ALLOWED_PACKAGES - local)
