"""Lines written into the exported repro.py (pure text): at its top, and its footer.

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
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from tfrepro import features as fb
from tfrepro.inside.devices import GPU_REPLICA_MB
from tfrepro.report.export import REFERENCE
from tfrepro.settings import TrialSettings


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
