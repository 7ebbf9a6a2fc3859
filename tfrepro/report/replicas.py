"""The `--replicas N` split, written into the exported repro.py (pure text).

A trial run with `--replicas N` had one device split into N logical ones
before the script's first op (inside/devices.py); the standalone repro.py
must do the same, so a maintainer with one device sees the N-replica bug.
The lines go right after the script's first top-level TensorFlow import (a
script that sets environment variables before importing TensorFlow keeps
that order), or when it has none after the module docstring and the
`__future__` imports (which must stay first), else at the top.
"""

from __future__ import annotations

import ast

from tfrepro.report.scriptargs import insert_lines, preamble_end

GPU_REPLICA_MB = 2048  # as inside/devices.py

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


def _insert_at(source: str) -> int | None:
    """The line index after the first top-level `import tensorflow` /
    `from tensorflow ...`, else after the docstring and `__future__` imports
    (None: the top, past a shebang and coding lines)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        body = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(name.partition(".")[0] == "tensorflow" for name in names):
                return node.end_lineno or node.lineno
    return preamble_end(body)


def with_split(source: str, n: int | None) -> str:
    """`source` with the split of one device into `n` (nothing for n <= 1)."""
    if not n or n <= 1:
        return source
    return insert_lines(source, _insert_at(source), _SPLIT.format(n=n, mb=GPU_REPLICA_MB))
