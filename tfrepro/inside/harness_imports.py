"""Post-import hooks inside the trial process: a function run right after a
watched top-level module (`tensorflow`, `keras`, `tf_keras`, a plugin's
choice) finishes importing (`PostImportFinder`, first on sys.meta_path; it
imports nothing early, so the script still decides when TensorFlow is
imported). Loaded by path by harness.py when it activates; stdlib only, no
tfrepro import. A hook that raises is handed to the harness's `note_error`.

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
import sys

_CODES: set = set()  # the wrappers' code objects


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


class _HookLoader:
    def __init__(self, loader, hook) -> None:
        self._loader = loader
        self._hook = hook  # PostImportFinder._consume's: notes a failing hook itself, never raises

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        # Introspection (importlib.resources, pkgutil) must see the real loader.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class PostImportFinder:
    """Runs hooks right after a watched top-level module finishes importing."""

    def __init__(self, hooks: dict, note_error) -> None:
        self._note_error = note_error  # the harness's: a hook that raises never fails the import
        self._hooks = {name: [fn] for name, fn in hooks.items()}
        self._waiting: set[str] = set()  # imported before the trial: hooks wait for its first import

    def add(self, fullname: str, hook) -> None:
        """Watch one more module; a module imported already gets the hook now
        (one imported before the trial: at the trial's first import of it)."""
        if fullname in sys.modules and fullname not in self._waiting:
            hook(sys.modules[fullname])
        else:
            self._hooks.setdefault(fullname, []).append(hook)

    def fire_imported(self) -> None:
        """Hooks of watched modules imported before the trial began (in a
        child of a warm server, inside/warm.py: TensorFlow and Keras; in a cold
        process none) run when the trial first imports one of them: where a
        cold process runs them, inside its first `import tensorflow` or
        `import keras` (each imports the other). Not now: a script that seeds
        NumPy or `random` before that import has its seed replaced by the
        trial's there, warm as cold (tests/test_warm.py)."""
        self._waiting = waiting = {n for n in self._hooks if n in sys.modules}
        if not waiting:
            return
        orig_import, orig_import_module = builtins.__import__, importlib.import_module

        def seen(name: str) -> None:  # an import: the first of a watched name puts both back, runs the hooks
            if not self._waiting or name.partition(".")[0] not in waiting:
                return
            self._waiting = set()
            if builtins.__import__ is _import:
                builtins.__import__ = orig_import
            if importlib.import_module is _import_module:
                importlib.import_module = orig_import_module
            for fullname in [n for n in self._hooks if n in waiting]:
                self._consume(fullname)(sys.modules[fullname])

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

    def find_spec(self, fullname, path=None, target=None):
        # A mere importlib.util.find_spec (TensorFlow probes for keras) also
        # lands here: the hooks are consumed when the module executes, not now.
        if fullname not in self._hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookLoader(spec.loader, self._consume(fullname))
                return spec
        return None

    def _consume(self, fullname):
        def run(module):
            for hook in self._hooks.pop(fullname, []):
                try:
                    hook(module)
                except Exception:
                    self._note_error(f"post-import hook for {fullname}")

        return run
