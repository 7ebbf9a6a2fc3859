"""Lines written into the top of the exported repro.py (pure text).

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
(which must stay first), else at the top."""

from __future__ import annotations

import ast
import shlex
from collections.abc import Sequence

from tfrepro import features as fb
from tfrepro.inside.devices import GPU_REPLICA_MB
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
