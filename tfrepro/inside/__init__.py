"""Code that runs INSIDE a trial (or probe) process, never in the CLI.

Every module in this package except this one is standalone: stdlib plus
TensorFlow/Keras/NumPy, never `import tfrepro`; each is loaded by path in the
child (`_inject/sitecustomize.py` loads the harness, the harness loads its
plugins). This file is the parent's only handle on them: where they are, and
one digest of all of them for the trial cache key (any change to any file in
here makes every cached trial stale, which is the honest answer).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

INSIDE_DIR = Path(__file__).resolve().parent
# Put first on a trial's PYTHONPATH: holds only sitecustomize.py, so the
# user's script cannot import our modules by accident.
INJECT_DIR = INSIDE_DIR / "_inject"
PROBES = INSIDE_DIR / "probes.py"
ENV_PROBE = INSIDE_DIR / "envprobe.py"
LOCALIZE_PLUGIN = INSIDE_DIR / "localize_plugin.py"
SETUP_PLUGIN = ENV_PROBE  # the report re-run's plugin: envprobe.install
LAUNCH = INSIDE_DIR / "launch.py"


@cache
def digest() -> str:
    """sha256 over every file that can run inside a trial (names and bytes)."""
    h = hashlib.sha256()
    for path in sorted(INSIDE_DIR.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == INSIDE_DIR:
            continue
        h.update(path.relative_to(INSIDE_DIR).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()
