"""How a trial process ends when it is not the harness's stop: the crash
excepthook, the parent watch (launch.py's), the Landlock write watch.

Loaded by harness.py (`_bound`) when the harness activates.
"""

from __future__ import annotations

import os
import sys
import traceback

H = None  # the harness core module, set by harness.py


def error_line(tp, value) -> tuple[str, str | None]:
    """("Type: first line of the message", the whole text when it has more).
    TensorFlow's messages run over many lines with node names and paths; the
    first line is the stable part to compare crashes by."""
    text = "".join(traceback.format_exception_only(tp, value)).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        return text, None
    return lines[0].strip(), text[-4000:]


def excepthook(orig):
    """`orig` after recording an uncaught exception as the trial's crash."""

    def hook(tp, value, tb):
        S = H.S
        if not issubclass(tp, SystemExit):
            S.crashed = True
            S.error, detail = error_line(tp, value)
            if detail:
                S.extra["error_detail"] = detail
        if H._FINDER is not None:  # without the first-import wrappers' frames (a cold process has none)
            tb = sys.modules["_tfrepro_harness_imports"].hide(value, tb)
        orig(tp, value, tb)

    return hook


def watch_parent() -> None:
    """Die with the tfrepro process that started us. A parent killed with
    SIGKILL cannot kill our session itself, and an orphaned trial would train
    on for nothing (and hold a core a resumed bisect needs). The trial runs in
    its own session, so killing our process group takes grandchildren too
    (the cold launcher's watch, launch.py)."""
    H._sibling_file("launch").watch_parent(os.getppid())


def watch_writes(spec: dict | None) -> None:
    """Landlock: name the first write outside the trial dir (confine.py's Watch)."""
    if not spec or spec.get("mode") != "landlock":
        return
    module = sys.modules.get("_tfrepro_confine") or H._sibling_file("confine")
    w = module.watch(spec, os.getcwd(), H.FRAMES.user_where)
    orig = sys.excepthook

    def hook(tp, value, tb):
        w.exception(value)
        orig(tp, value, tb)

    sys.excepthook = hook
