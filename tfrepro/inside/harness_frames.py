"""The user's file:line, inside the trial process: the one rule that walks a
stack or a traceback to the frame in the script's own code (a fit's call
site, a data read's, a write outside the trial dir, a dataset the script
iterates). Stdlib only, no tfrepro import; loaded by path by harness.py
(module `_tfrepro_harness_frames`), imported as a module by the tests.

Library code is told by its location, not by a name in its path: installed
packages, the standard library, the harness's own files (a project in a
folder called keras-bug/ or pandas-demo/ is the user's code).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback

_INSTALLED = ("site-packages", "dist-packages", "_tfrepro")
_OWN = os.path.dirname(os.path.abspath(__file__))
_STDLIB = tuple(
    {os.path.abspath(d) for d in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")) if d}
)


def is_library(name: str) -> bool:
    """Is the frame's file (its code's `co_filename`) library code, not the user's?"""
    if not name or name.startswith("<") or any(part in name for part in _INSTALLED):
        return True
    path = os.path.abspath(name)
    return any(path == d or path.startswith(d + os.sep) for d in (_OWN, *_STDLIB))


def user_where(frames=None, root: str | None = None) -> str | None:
    """file:line of the innermost of `frames` ((frame, line) pairs, innermost
    first, as `traceback.walk_stack`/`walk_tb` give them; by default the
    caller's stack) in the user's code: the first under `root` (default: the
    working directory), as a path relative to it; else the first anywhere,
    as an absolute path; None when every frame is a library's."""
    if frames is None:
        frames = traceback.walk_stack(sys._getframe(1))
    root = os.path.abspath(root or os.getcwd())
    fallback = None
    for frame, line in frames:
        name = frame.f_code.co_filename
        if is_library(name):
            continue
        path = os.path.abspath(name)
        if path.startswith(root + os.sep):
            return f"{os.path.relpath(path, root)}:{line}"
        fallback = fallback or f"{path}:{line}"
    return fallback
