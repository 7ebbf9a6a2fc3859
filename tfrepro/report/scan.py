"""What the exported repro sets up, read from its source (pure).

The issue form asks nothing about the training setup, yet precision policy,
replica count, XLA, determinism and eager execution decide most numerics and
performance bugs. A static read of the script answers for every symptom at no
cost; when the NaN localisation ran the script, the runtime facts it recorded
take precedence (`merge_runtime`).
"""

from __future__ import annotations

import re
from typing import Any

_POLICY = re.compile(r"""set_global_policy\(\s*["']([\w]+)["']""")
_POLICY_OBJ = re.compile(r"""mixed_precision\.Policy\(\s*["']([\w]+)["']""")
_JIT_TRUE = re.compile(r"jit_compile\s*=\s*True")
_SET_JIT = re.compile(r"optimizer\.set_jit\(\s*(True|[\"']autoclustering[\"'])")
_STRATEGY = re.compile(
    r"\b(MirroredStrategy|MultiWorkerMirroredStrategy|TPUStrategy|ParameterServerStrategy|"
    r"OneDeviceStrategy|CentralStorageStrategy)\s*\("
)
_LOGICAL = re.compile(r"set_logical_device_configuration\(")
_LOGICAL_N = re.compile(r"LogicalDeviceConfiguration\(")
_LOGICAL_RANGE = re.compile(r"LogicalDeviceConfiguration\([^)]*\)\s*(?:\]\s*\*\s*(\d+)|for\s+_\s+in\s+range\((\d+)\))")
_DETERMINISM = re.compile(r"enable_op_determinism\(\s*\)")
_EAGER = re.compile(r"run_functions_eagerly\(\s*True\s*\)")
_RUN_EAGERLY = re.compile(r"run_eagerly\s*=\s*True")
_LEGACY = re.compile(r"""TF_USE_LEGACY_KERAS["']\]\s*=\s*["'](1|true|True)["']|import\s+tf_keras""")
_CODE = re.compile(r"^[^#\n]*", re.M)


def _code_only(source: str) -> str:
    """Drop comments so a commented-out line never counts."""
    return "\n".join(m.group(0) for m in _CODE.finditer(source))


def scan_setup(source: str) -> dict[str, Any]:
    code = _code_only(source)
    setup: dict[str, Any] = {}
    m = _POLICY.search(code) or _POLICY_OBJ.search(code)
    setup["precision_policy"] = m.group(1) if m else "float32 (Keras default)"
    xla = []
    if _JIT_TRUE.search(code):
        xla.append("jit_compile=True")
    if _SET_JIT.search(code):
        xla.append("tf.config.optimizer.set_jit (auto-clustering)")
    setup["xla"] = ", ".join(xla) if xla else "off (no jit_compile=True, no auto-clustering)"
    strategies = sorted(set(_STRATEGY.findall(code)))
    if strategies:
        n = None
        r = _LOGICAL_RANGE.search(code)
        if r:
            n = int(r.group(1) or r.group(2))
        elif _LOGICAL.search(code):
            n = len(_LOGICAL_N.findall(code)) or None
        setup["distribution"] = ", ".join(strategies)
        setup["replicas"] = f"{n} (logical devices)" if n else "one per visible device"
    else:
        setup["distribution"] = "none (default strategy)"
        setup["replicas"] = "1"
    setup["determinism"] = (
        "tf.config.experimental.enable_op_determinism() in the script"
        if _DETERMINISM.search(code)
        else "not set by the script"
    )
    eager = []
    if _EAGER.search(code):
        eager.append("tf.config.run_functions_eagerly(True)")
    if _RUN_EAGERLY.search(code):
        eager.append("run_eagerly=True")
    setup["eager"] = ", ".join(eager) if eager else "off (graph mode)"
    setup["keras_flavour"] = "tf_keras (Keras 2, TF_USE_LEGACY_KERAS)" if _LEGACY.search(code) else "keras (Keras 3)"
    return setup


def merge_runtime(setup: dict[str, Any], runtime: dict[str, Any] | None) -> dict[str, Any]:
    """Facts recorded while the script ran (`inside/runprobe.py`) override the static
    read where they are known."""
    if not runtime:
        return setup
    out = dict(setup)
    if runtime.get("precision_policy"):
        out["precision_policy"] = runtime["precision_policy"] + " (observed at run time)"
    if runtime.get("replicas"):
        out["replicas"] = f"{runtime['replicas']} (observed at run time)"
    if runtime.get("jit_compile_requested"):
        out["xla"] = ", ".join(runtime["jit_compile_requested"]) + " (observed at run time)"
    if runtime.get("op_determinism") is True:
        out["determinism"] = "op determinism enabled (observed at run time)"
    if runtime.get("run_functions_eagerly") is True:
        out["eager"] = "tf.config.run_functions_eagerly(True) (observed at run time)"
    return out


def merge_trial_setup(setup: dict[str, Any], facts: dict[str, Any] | None) -> dict[str, Any]:
    """Facts the report's re-run recorded (`inside/setup_plugin.py`, under
    `extra["setup"]`) override the static read."""
    if not facts:
        return setup
    out = dict(setup)
    if facts.get("precision_policy"):
        out["precision_policy"] = f"{facts['precision_policy']} (observed at run time)"
    if facts.get("replicas") is not None:
        out["replicas"] = f"{facts['replicas']} (observed at run time)"
    if facts.get("strategy") and facts["strategy"] not in ("_DefaultDistributionStrategy",):
        out["distribution"] = facts["strategy"]
    if "jit_compile" in facts:
        out["xla"] = (
            "jit_compile=True in Model.fit (observed at run time)"
            if facts["jit_compile"]
            else setup.get("xla", "off") + "; model.jit_compile False at run time"
        )
    if facts.get("run_functions_eagerly"):
        out["eager"] = "tf.config.run_functions_eagerly(True) (observed at run time)"
    return out


# What a TensorFlow bug report may assume is installed.
_ALLOWED_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "numpy"})


def extra_imports(files: dict[str, str]) -> list[str]:
    """Top-level packages the exported scripts import beyond the standard
    library, TensorFlow/Keras, NumPy and the bundle's own modules (sorted).
    A repro for the issue tracker should need none; `tfrepro` least of all."""
    import ast
    import sys

    local = {rel[:-3].replace("/", ".").split(".")[0] for rel in files if rel.endswith(".py")}
    found: set[str] = set()
    for text in files.values():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in _ALLOWED_PACKAGES and top not in local:
                    found.add(top)
    return sorted(found)
