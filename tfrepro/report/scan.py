"""The exported repro.py's source (pure): what it sets up, and the lines written into it.

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

The script's own arguments (`tfrepro bisect train.py -- --epochs 3`): the
run's trial command carries them; the exported repro.py (and `new
--from`'s) takes them when it is given none (`default_args`: a plain
`python repro.py` is the run's command), and the notebook sets `sys.argv`
to them before the script's code runs.

The `--replicas N` split (`with_split`): a trial run with `--replicas N`
had one device split into N logical ones before the script's first op
(inside/devices.py); the standalone repro.py does the same, so a
maintainer with one device sees the N-replica bug. The lines go right
after the script's first top-level TensorFlow import (a script that sets
environment variables before importing TensorFlow keeps that order), or
when it has none after the module docstring and the `__future__` imports
(which must stay first), else at the top.

The footer (`with_footer`): the bundle's repro.py says what it shows, a last line printed by a few
lines appended to it, stating whether the run's symptom was seen.

A script that trains with `verbose=0` prints nothing: a maintainer running
`python repro.py` could not tell a NaN from a healthy run. The footer checks
what a plain process can see, without tfrepro:

- nan: every Keras model still alive (`gc`) for a non-finite loss in its
  `history` or a non-finite weight: "symptom seen" or "NOT seen";
- crash: reaching the end means the crash did not happen (when it does,
  its traceback is the last thing printed and the footer never runs);
- slowdown, memory, mismatch: the process's CPU time, its peak memory, the
  last loss of each model's history, next to the run's numbers: one
  process cannot judge those alone, the line says to compare with the
  reference (reference.py, or reference/repro.py).

The footer never raises (a failure prints why it could not check). Its
lines are all marked `(tfrepro)`; the trial harness ends a trial before it
at the step cap, and when a short script reaches it, it only prints.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

from tfrepro import catalog
from tfrepro import features as fb
from tfrepro.inside.devices import GPU_REPLICA_MB
from tfrepro.report.export import REFERENCE
from tfrepro.report.records import RuntimeSettings
from tfrepro.settings import TrialSettings
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
    inside/envprobe.py), then the NaN localisation's settings
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


def script_args(settings: TrialSettings, entry: str) -> list[str]:
    """The arguments after the entry script in the trial command ([] when none)."""
    cmd = list(settings.command or ())
    return cmd[cmd.index(entry) + 1 :] if entry in cmd else []


def insert_lines(text: str, at: int | None, code: str) -> str:
    """`text` with `code` before its line index `at` (None: after the lines that
    must stay first, a shebang on line 1 and a PEP 263 coding line on line 1 or 2)."""
    lines = fb.split_lines(text)
    if at is None:
        at = 0
        while (
            at < min(2, len(lines))
            and lines[at].startswith("#")
            and ("coding" in lines[at][:40] or at == 0 and lines[at].startswith("#!"))
        ):
            at += 1
    if at and not lines[at - 1].endswith(("\n", "\r")):
        lines[at - 1] += "\n"
    return "".join([*lines[:at], code, *lines[at:]])


def preamble_end(body: Sequence[ast.stmt]) -> int | None:
    """The line after the module docstring and the `__future__` imports, which
    must stay first (None when the module starts with other code)."""
    i = 1 if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) else 0
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":  # type: ignore[attr-defined]
        i += 1
    return (body[i - 1].end_lineno or body[i - 1].lineno) if i else None


def default_args(text: str, entry: str, args: Sequence[str]) -> str:
    """`text` that runs with `args` when it is given no arguments: three lines
    at `preamble_end` (`insert_lines`). A text that does not parse gets a
    first comment line saying how to run it instead (`insert_lines`' top)."""
    if not args:
        return text
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return insert_lines(text, None, f"# run it with its arguments: python {entry} {shlex.join(args)}\n")
    code = (
        f"import sys  # (tfrepro) given no arguments, the run's: python {entry} {shlex.join(args)}\n"
        f"if len(sys.argv) == 1:\n    sys.argv += {list(args)!r}\n"
    )
    return insert_lines(text, preamble_end(body), code)


def notebook_code(code: str, entry: str, args: Sequence[str]) -> str:
    """The script for the notebook: `sys.argv` set to its arguments first."""
    if not args:
        return code
    return f"import sys\n\nsys.argv = {[entry, *args]!r}  # the script's arguments\n\n" + code


_SPLIT = """\
# Added by tfrepro (--replicas {n}): the bug needs {n} replicas under a distribution
# strategy. These lines split this machine's one device into {n} logical devices
# before anything runs (the CPU into {n} logical CPUs, or one GPU into {n} logical
# GPUs of {mb} MiB each), so MirroredStrategy() sees {n} replicas. A machine with
# {n} real GPUs keeps them as they are.
import tensorflow as _tf_split

_gpus = _tf_split.config.list_physical_devices("GPU")
if len(_gpus) < {n}:
    _conf = _tf_split.config.LogicalDeviceConfiguration
    _tf_split.config.set_logical_device_configuration(
        _gpus[0] if _gpus else _tf_split.config.list_physical_devices("CPU")[0],
        [_conf(memory_limit={mb}) if _gpus else _conf() for _ in range({n})],
    )
"""


def with_split(source: str, n: int | None) -> str:
    """`source` with the split of one device into `n` (nothing for n <= 1)."""
    if not n or n <= 1:
        return source
    try:
        body = ast.parse(source).body
    except SyntaxError:
        body = []
    # after the first top-level `import tensorflow` / `from tensorflow ...`, else after the
    # docstring and `__future__` imports (None: the top, past a shebang and coding lines)
    at = preamble_end(body)
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(name.partition(".")[0] == "tensorflow" for name in names):
                at = node.end_lineno or node.lineno
                break
    return insert_lines(source, at, _SPLIT.format(n=n, mb=GPU_REPLICA_MB))


BEGIN = "# ---- (tfrepro) what this run shows: the last line it prints ----\n"

_BODY = """\
def _tfrepro_shows():
    import gc, math, resource, sys
    try:
        kinds = tuple(m.Model for m in (sys.modules.get("keras"), sys.modules.get("tf_keras")) if m and hasattr(m, "Model"))
        models = [o for o in gc.get_objects() if kinds and isinstance(o, kinds)]
        bad, last = [], []
        for m in models:
            losses = [float(x) for x in ((getattr(getattr(m, "history", None), "history", None) or {}).get("loss") or [])]
            if losses:
                last.append(f"{m.name} {losses[-1]:.6g}")
            if any(not math.isfinite(x) for x in losses):
                bad.append(f"the loss of {m.name}")
            elif any(not __import__("numpy").isfinite(w).all() for w in m.get_weights()):
                bad.append(f"the weights of {m.name}")
        use = resource.getrusage(resource.RUSAGE_SELF)
        peak = use.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
        facts = f"{len(models)} Keras model(s); last loss: {', '.join(last) or '-'}; CPU {use.ru_utime + use.ru_stime:.1f} s; peak memory {peak:.0f} MB"
        print("(tfrepro) " + SAY(bad, facts), flush=True)
    except Exception as e:  # noqa: BLE001 - the footer only reports
        print(f"(tfrepro) could not check what this run shows ({type(e).__name__}: {e})", flush=True)


_tfrepro_shows()
"""


def _say(symptom: str, result: Mapping[str, Any], reference: str) -> str:
    """The expression (over `bad` and `facts`) the footer prints: the run's facts in it."""
    failing = result.get("culprit_trial") or result.get("failing") or {}
    culprits = ", ".join(result.get("culprits") or []) or "the culprits"
    if symptom == "nan":
        step = failing.get("first_nonfinite_step")
        ran = f"the run saw it at step {step}" if step else "the run saw it"
        return (
            f"(f\"symptom seen: NaN/Inf in {{', '.join(bad)}} ({ran}; {{facts}})\" if bad "
            f'else f"symptom NOT seen: no NaN/Inf in any Keras model\'s loss or weights ({ran}; {{facts}})")'
        )
    if symptom == "crash":
        error = str(failing.get("error") or "a crash").replace("\\", "\\\\").replace('"', '\\"').replace("{", "{{")
        error = error.replace("}", "}}")[:200]
        return f'f"symptom NOT seen: it ran to its end without the run\'s crash ({error}; {{facts}})"'
    what = {"slowdown": "slower per step", "memory": "more memory", "mismatch": "a different loss"}.get(
        symptom, symptom
    )
    return (
        f"f\"ran to its end ({{facts}}); the run's symptom: {symptom} ({what} with {culprits}): "
        f'compare with python {reference}"'
    )


def with_footer(text: str, symptom: str, result: Mapping[str, Any], reference: str = REFERENCE) -> str:
    """`text` with the footer (the lines appended to repro.py, see the module doc) at its end, the run's facts in
    it; `reference`: where the bundle's reference lies (`Export.ref_name`)."""
    body = text if text.endswith("\n") or not text else text + "\n"
    return body + "\n\n" + BEGIN + _BODY.replace("SAY(bad, facts)", _say(symptom, result, reference))
