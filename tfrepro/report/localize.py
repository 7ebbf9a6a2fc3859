"""Where the first non-finite value is born: the culprit variant re-run under
`tf.debugging.enable_check_numerics()` (XLA off), its error read back into an
op, a layer and a line of the exported repro.

`parse_check_numerics` and `enclosing_scope` are pure (tested on captured
messages); `localize` runs the variant as a trial (a cold process behind the
launcher, confined, with the trial's watchdog and time limit) with the
harness plugin `inside/localize_plugin.py`.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from tfrepro.inside import LOCALIZE_PLUGIN
from tfrepro.report.answer import Localization
from tfrepro.report.export import write_files
from tfrepro.report.records import RuntimeSettings
from tfrepro.report.rerun import run_as_written
from tfrepro.settings import TrialSettings
from tfrepro.trials.trial import TrialOptions

_DETECTED = re.compile(r'Detected Infinity or NaN in output (\d+) of (graph op|eagerly-executing op) "([^"]+)"')
_NODE = re.compile(r"Detected at node '?([^\s']+?)'? defined at|\{\{node ([^}]+)\}\}")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_STACK_FRAME = re.compile(r"\+ (\S+) \(L(\d+)\) (\S+)")
_KIND = re.compile(r"Tensor had ([^\n]*?) values")
_DTYPE = re.compile(r"dtype: <dtype: '([^']+)'>")
_SHAPE = re.compile(r"shape: (\([^)]*\)|\[[^\]]*\])")
_INPUT = re.compile(r'Input tensors?[^:]*:\s*(?:\d+:\s*)?Tensor\("([^"]+)"')
# Scope components Keras/TF add around a layer's ops, never a layer name.
_NOT_LAYERS = {"CheckNumericsV2", "gradient_tape", "gradients", "while", "cond", "body"}


class ProbeFacts(TypedDict, total=False):
    """What inside/localize_plugin.py records of the check_numerics run."""

    completed: bool
    error_type: str | None
    message: str | None
    traceback: str
    layers: list[list[str]]  # [name, class]
    settings: RuntimeSettings


def enclosing_scope(source: str, line: int) -> str | None:
    """`Class.method` or `function` whose body holds `line` (innermost), or None
    at module level."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    def descend(node: ast.AST, trail: list[str]) -> list[str]:
        for child in ast.iter_child_nodes(node):
            first, last = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if first is not None and last is not None and first <= line <= last:
                return descend(child, trail + [child.name] if isinstance(child, defs) else trail)
        return trail

    trail = descend(tree, [])
    return ".".join(trail) if trail else None


def parse_check_numerics(
    message: str,
    *,
    script: str,
    source: str = "",
    layers: dict[str, str] | None = None,
    rel: str = "repro.py",
    traceback_text: str = "",
) -> Localization:
    """Read a check_numerics error. `script` is the path the child ran (frames
    in that file are the user's code); `source` its text (for the line and its
    enclosing class); `layers` the model's layer name -> class;
    `traceback_text` the Python traceback of the error (eager ops).

    Three readings, each its own step: the graph node (op, scope, layer,
    forward or backward), the user's line (the innermost frame in the
    script), and the excerpt a maintainer wants to read."""
    layers = layers or {}
    m = _DETECTED.search(message)
    if not m:
        note = "the error is not a check_numerics report"
        return Localization(found=False, note=note, excerpt=message.strip()[:2000])
    where = _node_of(message, layers)
    line = _user_line(message, traceback_text, script, source, rel)
    layer, layer_class = where.layer, where.layer_class
    if layer_class is None and line.function and "." in line.function:
        cls = line.function.split(".")[0]
        if cls in layers.values() or not layers:
            layer_class = cls
        named = [n for n, c in layers.items() if c == cls]
        if layer is None and len(named) == 1:
            layer = named[0]
    facts = {"file": line.file, "line": line.line, "code": line.code, "function": line.function}
    for key, rx in (("kind", _KIND), ("dtype", _DTYPE), ("shape", _SHAPE), ("input_tensor", _INPUT)):
        facts[key] = found.group(1) if (found := rx.search(message)) else None
    # the excerpt: the report itself, without the op-creation stack; an eager report's whole input
    # tensor cut to its first lines
    start = message.find("!!! Detected")
    stop = message.find("Stack trace of op's creation", start)
    excerpt = message[start : stop if stop > 0 else len(message)].strip()
    cut = excerpt.find("Input tensor: tf.Tensor(")
    if cut >= 0:
        cut = excerpt.rfind("\n", 0, cut) + 1
        excerpt = "\n".join(excerpt[:cut].splitlines() + excerpt[cut:].splitlines()[:3] + ["  ..."])
    return replace(where, op_type=m.group(3), layer=layer, layer_class=layer_class, excerpt=excerpt[:1500], **facts)


def _node_of(message: str, layers: dict[str, str]) -> Localization:
    """The graph node the report names, its name scope, the layer it belongs
    to (matched against the model's layers, else the innermost scope part)
    and whether it is part of the gradient computation (a found Localization
    holding only those)."""
    nm = _NODE.search(message)
    node = re.sub(r"/CheckNumerics(V2)?$", "", (nm.group(1) or nm.group(2)).strip()) if nm else None
    parts = node.split("/") if node else []
    # The innermost scope component naming a known layer (Keras uniquifies name scopes: `custom_norm`
    # traced as `custom_norm_1`, so a numeric suffix is tried off too). No model layer list (custom
    # loop, legacy Keras): the innermost scope component is the best name there is.
    scopes = [p for p in parts[:-1] if p not in _NOT_LAYERS]
    known = [name for p in reversed(scopes) for name in (p, re.sub(r"_\d+$", "", p)) if name in layers]
    layer = known[0] if known else (scopes[-1] if scopes else None)
    layer_class = layers[known[0]] if known else None
    scope = "/".join(parts[:-1]) if len(parts) > 1 else None
    backward = any(p.startswith(("gradient", "Grad")) or "_grad" in p.lower() for p in parts)
    return Localization(True, node=node, scope=scope, layer=layer, layer_class=layer_class, backward=backward)


def _user_line(message: str, traceback_text: str, script: str, source: str, rel: str) -> Localization:
    """file/line/code/function of the innermost frame in the user's script
    (a found Localization holding only those): from the op's creation
    stack, else (eager ops carry none) from the exception's own traceback.
    Either lists its frames (file, line, function) outermost first; the
    script's are those naming its path or (the op-creation stack abbreviates
    long paths with a leading '...') its basename, else those whose path
    resolves to it."""
    script_abs, base = os.path.abspath(script), os.path.basename(script)
    user: list[tuple[str, str, str]] = []
    for frames in (_FRAME.findall(message) + _STACK_FRAME.findall(message), _FRAME.findall(traceback_text)):
        resolved = [x for x in frames if not x[0].startswith("...") and os.path.abspath(x[0]) == script_abs]
        user = user or [x for x in frames if x[0] in (script_abs, base)] or resolved
    if not user:
        return Localization(True)
    n = int(user[-1][1])
    lines = source.splitlines()
    code = lines[n - 1].strip() if 0 < n <= len(lines) else None
    return Localization(True, file=rel, line=n, code=code, function=enclosing_scope(source, n) if source else None)


def localize(
    files: dict[str, str], data: bytes | None = None, *, settings: TrialSettings = TrialSettings()
) -> Localization:
    """Run the exported variant `files` (relpath -> text; `settings.entry`
    its script; `data`: the records a reduced one reads) under
    check_numerics as a trial, XLA off, and say where the first non-finite
    value came from. `settings`: the re-run's (the bisect's, for the
    exported script); the run goes to the script's own end or its first
    NaN, within the settings' `timeout_s`. Never raises for a failing run:
    the note says what happened."""
    # As the script is written (no seed or determinism the harness adds), with no step cap: to its
    # own end or its symptom, at most `budget_s` seconds of training within the time limit.
    budget = min(settings.budget_s, 0.9 * settings.timeout_s)
    settings = replace(settings, until_symptom=True, budget_s=budget, deterministic=False, repeat=0)
    flags = re.sub(r"--tf_xla_auto_jit=\S+", "", os.environ.get("TF_XLA_FLAGS", "")).strip()
    with tempfile.TemporaryDirectory(prefix="tfrepro-localize-", ignore_cleanup_errors=True) as tmp:
        how = TrialOptions(
            label="localize",
            state_dir=Path(tmp) / "state",
            # Auto-clustering would put ops under XLA too.
            env={"TF_XLA_FLAGS": (flags + " --tf_xla_auto_jit=0").strip()},
            plugins=(LOCALIZE_PLUGIN,),
            cold=True,
        )
        got = run_as_written(write_files(Path(tmp) / "repro", files, data), settings, how)
        script = Path(got.log_dir or tmp) / "variant" / settings.entry  # the trial's copy: its traceback's frames
    if got.timed_out:
        return Localization(found=False, note=f"the check_numerics run timed out after {settings.timeout_s:.0f} s")
    facts: ProbeFacts | None = got.extra.get("localize")
    if not isinstance(facts, dict):
        note = f"the check_numerics run failed (exit {got.exit_code}): {got.error or 'no output'}"
        return Localization(found=False, note=note)
    ran: RuntimeSettings = facts.get("settings") or {}
    if got.precision_policy is not None:  # the trial's own reading: the policy its model trained in
        ran = {**ran, "precision_policy": got.precision_policy}
    if facts.get("completed"):
        note = (
            "check_numerics saw no NaN/Inf in any op output with XLA off: the non-finite value "
            "may come from XLA itself, or only the final weights are non-finite"
        )
        return Localization(found=False, settings=ran, note=note)
    msg, tb = facts.get("message") or "", facts.get("traceback") or ""
    loc = parse_check_numerics(
        msg,
        script=str(script),
        source=files.get(settings.entry, ""),
        layers=dict(facts.get("layers") or []),
        rel=settings.entry,
        traceback_text=tb,
    )
    if not loc.found:
        last = (tb or msg).strip().splitlines()[-1:] or [""]
        note = f"the run raised {facts.get('error_type')} before any NaN/Inf: {last[0]}"
        return Localization(found=False, settings=ran, note=note, excerpt=loc.excerpt)
    return replace(loc, settings=ran)
