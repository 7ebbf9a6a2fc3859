"""Where the first non-finite value is born: the culprit variant re-run under
`tf.debugging.enable_check_numerics()` (XLA off), its error read back into an
op, a layer and a line of the exported repro.

`parse_check_numerics` and `enclosing_scope` are pure (tested on captured
messages); `localize` runs the child (`inside/runprobe.py`).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tfrepro.inside import RUN_PROBE
from tfrepro.report.environment import child_env

PROBE = RUN_PROBE

_DETECTED = re.compile(
    r'Detected Infinity or NaN in output (\d+) of (graph op|eagerly-executing op) "([^"]+)"'
)
_NODE = re.compile(r"Detected at node '?([^\s']+?)'? defined at|\{\{node ([^}]+)\}\}")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_STACK_FRAME = re.compile(r"\+ (\S+) \(L(\d+)\) (\S+)")
_KIND = re.compile(r"Tensor had ([^\n]*?) values")
_DTYPE = re.compile(r"dtype: <dtype: '([^']+)'>")
_SHAPE = re.compile(r"shape: (\([^)]*\)|\[[^\]]*\])")
_INPUT = re.compile(r'Input tensors?[^:]*:\s*(?:\d+:\s*)?Tensor\("([^"]+)"')
_GRAPH = re.compile(r'Graph name: "([^"]+)"')
# Scope components Keras/TF add around a layer's ops, never a layer name.
_NOT_LAYERS = {"CheckNumericsV2", "gradient_tape", "gradients", "while", "cond", "body"}


@dataclass(frozen=True)
class Localization:
    """The first non-finite value check_numerics saw. `found` False means the
    run finished (or failed) without check_numerics firing; `note` says why."""

    found: bool
    op_type: str | None = None
    node: str | None = None  # full graph node name, CheckNumerics suffix removed
    scope: str | None = None  # name scope of the node (layers, outer to inner)
    layer: str | None = None  # the layer name, matched against the model's layers
    layer_class: str | None = None
    kind: str | None = None  # "NaN", "+Inf", ...
    dtype: str | None = None
    shape: str | None = None
    input_tensor: str | None = None
    backward: bool = False  # the op belongs to the gradient computation
    file: str | None = None  # relative to the repro directory
    line: int | None = None
    code: str | None = None  # the source line
    function: str | None = None  # Class.method / function containing the line
    note: str = ""
    excerpt: str = ""  # the part of the error a maintainer wants to read
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def headline(self) -> str:
        if not self.found:
            return self.note or "check_numerics did not fire"
        where = f"layer `{self.layer}`" if self.layer else (f"scope `{self.scope}`" if self.scope else "")
        if self.layer_class:
            where += f" ({self.layer_class})" if where else f"`{self.layer_class}`"
        loc = f"{self.file}:{self.line}" if self.file and self.line else ""
        text = f"first non-finite value ({self.kind or 'NaN/Inf'}) produced by op `{self.op_type}`"
        if where:
            text += f" in {where}"
        if self.backward:
            text += ", in the backward pass"
        if loc:
            text += f" at {loc}"
            if self.function:
                text += f" in `{self.function}`"
        return text


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


def _match_layer(scope_parts: list[str], layers: dict[str, str]) -> tuple[str | None, str | None]:
    """The innermost scope component naming a known layer. Keras uniquifies
    name scopes (`custom_norm` traced as `custom_norm_1`), so a numeric suffix
    is tried off too."""
    for part in reversed(scope_parts):
        if part in _NOT_LAYERS:
            continue
        if part in layers:
            return part, layers[part]
        base = re.sub(r"_\d+$", "", part)
        if base in layers:
            return base, layers[base]
    return None, None


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
    `traceback_text` the Python traceback of the error (eager ops)."""
    layers = layers or {}
    m = _DETECTED.search(message)
    if not m:
        return Localization(found=False, note="the error is not a check_numerics report",
                            excerpt=message.strip()[:2000])
    op_type = m.group(3)
    node = None
    for nm in _NODE.finditer(message):
        node = (nm.group(1) or nm.group(2)).strip()
        break
    if node:
        node = re.sub(r"/CheckNumerics(V2)?$", "", node)
    parts = node.split("/") if node else []
    scope = "/".join(parts[:-1]) if len(parts) > 1 else None
    layer, layer_class = _match_layer(parts[:-1], layers)
    if layer is None and len(parts) > 1:
        # No model layer list (custom loop, legacy Keras): the innermost
        # scope component is the best name there is.
        cand = [p for p in parts[:-1] if p not in _NOT_LAYERS]
        layer = cand[-1] if cand else None
    backward = any(p.startswith(("gradient", "Grad")) or "_grad" in p.lower() for p in parts)

    file = line = code = function = None
    script_abs = os.path.abspath(script)
    base = os.path.basename(script)
    frames = [(f, int(n), fn) for f, n, fn in _FRAME.findall(message)]
    frames += [(f, int(n), fn) for f, n, fn in _STACK_FRAME.findall(message)]
    user = _user_frames(frames, script_abs, base)
    if not user and traceback_text:
        # Eager ops carry no creation stack: the exception's own traceback,
        # innermost frame last, is where the op ran.
        user = _user_frames([(f, int(n), fn) for f, n, fn in _FRAME.findall(traceback_text)],
                            script_abs, base)
    for f, n, fn in user[-1:]:
        file, line = rel, n
        lines = source.splitlines()
        code = lines[n - 1].strip() if 0 < n <= len(lines) else None
        function = enclosing_scope(source, n) if source else None
        if layer_class is None and function and "." in function:
            cls = function.split(".")[0]
            if cls in layers.values() or not layers:
                layer_class = cls
            named = [n for n, c in layers.items() if c == cls]
            if layer is None and len(named) == 1:
                layer = named[0]
    kind = _KIND.search(message)
    dtype = _DTYPE.search(message)
    shape = _SHAPE.search(message)
    inp = _INPUT.search(message)
    start = message.find("!!! Detected")
    stop = message.find("Stack trace of op's creation", start)
    excerpt = message[start:stop if stop > 0 else len(message)].strip()
    # Eager reports print the whole input tensor: keep its first lines only.
    cut = excerpt.find("Input tensor: tf.Tensor(")
    if cut >= 0:
        cut = excerpt.rfind("\n", 0, cut) + 1
        excerpt = "\n".join(excerpt[:cut].splitlines() + excerpt[cut:].splitlines()[:3] + ["  ..."])
    excerpt = excerpt[:1500]
    return Localization(
        found=True, op_type=op_type, node=node, scope=scope, layer=layer, layer_class=layer_class,
        kind=kind.group(1) if kind else None, dtype=dtype.group(1) if dtype else None,
        shape=shape.group(1) if shape else None, input_tensor=inp.group(1) if inp else None,
        backward=backward, file=file, line=line, code=code, function=function, excerpt=excerpt,
    )


def _user_frames(frames: list[tuple[str, int, str]], script_abs: str, base: str) -> list[tuple[str, int, str]]:
    """Frames in the repro script, in the order the message lists them
    (outermost first). The op-creation stack abbreviates long paths with a
    leading '...', so a basename match is accepted there."""
    out = []
    for f, n, fn in frames:
        if f == script_abs or f == base or (not f.startswith("...") and os.path.abspath(f) == script_abs):
            out.append((f, n, fn))
    full = [x for x in out if x[0] in (script_abs, base)]
    return full or out


def localize(
    files: dict[str, str],
    *,
    entry: str = "repro.py",
    python: str | None = None,
    timeout_s: float = 300.0,
) -> Localization:
    """Run the exported variant `files` (relpath -> text) under check_numerics
    in a fresh process, XLA off, and say where the first non-finite value came
    from. Never raises for a failing run: the note says what happened."""
    python = python or sys.executable
    tmp = tempfile.mkdtemp(prefix="tfrepro-localize-")
    try:
        return _localize_in(tmp, files, entry, python, timeout_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    """The probe runs in its own session: kill it and everything it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not honoured
        pass


def _run_probe(cmd: list[str], root: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str] | None:
    """(exit code, stderr) of the probe, or None when it timed out. Its whole
    process group is killed on the way out, finished or not."""
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, err or ""
    except subprocess.TimeoutExpired:
        return None
    finally:
        _kill_group(proc)


def _localize_in(tmp: str, files: dict[str, str], entry: str, python: str, timeout_s: float) -> Localization:
    root = Path(tmp) / "repro"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    out = Path(tmp) / "probe.json"
    env = child_env()
    # Auto-clustering would put ops under XLA too.
    flags = re.sub(r"--tf_xla_auto_jit=\S+", "", env.get("TF_XLA_FLAGS", "")).strip()
    env["TF_XLA_FLAGS"] = (flags + " --tf_xla_auto_jit=0").strip()
    done = _run_probe([python, str(PROBE), str(out), str(root / entry)], root, env, timeout_s)
    if done is None:
        return Localization(found=False, note=f"the check_numerics run timed out after {timeout_s:.0f} s")
    if not out.exists():
        tail = done[1].strip().splitlines()[-1:] or ["no output"]
        return Localization(found=False, note=f"the check_numerics run failed (exit {done[0]}): {tail[0]}")
    facts = json.loads(out.read_text(encoding="utf-8"))
    settings = facts.get("settings") or {}
    layers = {n: c for n, c in facts.get("layers") or []}
    if facts.get("completed"):
        return Localization(
            found=False, settings=settings,
            note="check_numerics saw no NaN/Inf in any op output with XLA off: the non-finite value "
                 "may come from XLA itself, or only the final weights are non-finite",
        )
    msg = facts.get("message") or ""
    loc = parse_check_numerics(msg, script=str(root / entry), source=files.get(entry, ""),
                               layers=layers, rel=entry, traceback_text=facts.get("traceback") or "")
    if not loc.found:
        last = (facts.get("traceback") or msg).strip().splitlines()[-1:] or [""]
        return Localization(found=False, settings=settings,
                            note=f"the run raised {facts.get('error_type')} before any NaN/Inf: {last[0]}",
                            excerpt=loc.excerpt)
    return Localization(**{**loc.to_dict(), "settings": settings})
