"""The first import of modules imported before the trial, inside the trial
process (loaded by path by harness.py in a child of a warm server only;
stdlib only, no tfrepro import).

In a warm child TensorFlow and Keras are in sys.modules before the script
runs, so no finder sees the script import them; a cold process runs the
harness's hooks for them (seeds, determinism) inside that first import. This
module calls them there too: it wraps `builtins.__import__` (import and from
statements, `__import__`) and `importlib.import_module` until the first
import of a watched name, then puts both back. `hide` takes the wrappers'
frames out of a traceback the harness prints: a cold process has none.
"""

from __future__ import annotations

import builtins
import importlib

_CODES: set = set()  # the wrappers' code objects


def on_first_import(names: set, fire) -> None:
    """Call `fire()` once, right after the first import of a top-level module in `names`."""
    orig_import, orig_import_module = builtins.__import__, importlib.import_module
    done = False

    def seen(name: str) -> None:
        nonlocal done
        if done or name.partition(".")[0] not in names:
            return
        done = True
        if builtins.__import__ is _import:
            builtins.__import__ = orig_import
        if importlib.import_module is _import_module:
            importlib.import_module = orig_import_module
        fire()

    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        module = orig_import(name, globals, locals, fromlist, level)
        if level == 0:
            seen(name)
        return module

    def _import_module(name, package=None):
        module = orig_import_module(name, package)
        if not name.startswith("."):
            seen(name)
        return module

    _CODES.update((_import.__code__, _import_module.__code__))
    builtins.__import__ = _import
    importlib.import_module = _import_module


def hide(exc: BaseException | None, tb):
    """`tb` (the traceback of `exc`) and those of the exceptions chained to
    it, without the wrappers' frames; returns the new head of `tb`."""
    seen: set = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = _pruned(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__
    return _pruned(tb)


def _pruned(tb):
    while tb is not None and tb.tb_frame.f_code in _CODES:
        tb = tb.tb_next
    node = tb
    while node is not None:
        while node.tb_next is not None and node.tb_next.tb_frame.f_code in _CODES:
            node.tb_next = node.tb_next.tb_next
        node = node.tb_next
    return tb
