"""Post-import hooks: a function run right after a watched top-level module
(`tensorflow`, `keras`, `tf_keras`, a plugin's choice) finishes importing.

Loaded by path by harness.py (module `_tfrepro_harness_imports`) when the
harness activates; stdlib only, like the harness it imports no tfrepro
module. The finder sits first on sys.meta_path and imports nothing early:
the script still decides when TensorFlow is imported (and can set
TF_USE_LEGACY_KERAS or logical devices before). A hook that raises is handed
to `note_error` (the result's harness_errors); it never fails the import.
"""

from __future__ import annotations

import sys


class _HookLoader:
    def __init__(self, loader, hook, note_error) -> None:
        self._loader = loader
        self._hook = hook
        self._note_error = note_error

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        # Introspection (importlib.resources, pkgutil) must see the real loader.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception:
            self._note_error(f"post-import hook for {module.__name__}")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class PostImportFinder:
    """Runs hooks right after a watched top-level module finishes importing."""

    def __init__(self, hooks: dict, note_error) -> None:
        self._hooks = {name: [fn] for name, fn in hooks.items()}
        self._note_error = note_error  # where -> None: a hook raised (the result's harness_errors)

    def add(self, fullname: str, hook) -> None:
        """Watch one more module; a module imported already gets the hook now."""
        if fullname in sys.modules:
            hook(sys.modules[fullname])
        else:
            self._hooks.setdefault(fullname, []).append(hook)

    def fire_imported(self) -> None:
        """Run now the hooks of watched modules imported already: in a child
        of a warm server (inside/warm.py) TensorFlow and Keras were imported
        before the trial began; in a cold process this does nothing."""
        for name in [n for n in self._hooks if n in sys.modules]:
            self._consume(name)(sys.modules[name])

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
                    spec.loader = _HookLoader(spec.loader, self._consume(fullname), self._note_error)
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
