"""tfrepro trial injection: this directory is put first on PYTHONPATH of a
trial process only. With TFREPRO_TRIAL_CONFIG set, the first Python process
loads the harness (by path, never as part of tfrepro) and pops the variable
so the processes it spawns run unmeasured. Any sitecustomize this file
shadows is then run as usual."""

import os
import sys


def _tfrepro_activate():
    config = os.environ.pop("TFREPRO_TRIAL_CONFIG", None)
    if not config:
        return
    try:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness.py")
        spec = importlib.util.spec_from_file_location("_tfrepro_harness", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        compiled = getattr(sys.modules.get("_tfrepro_warm"), "COMPILED", {})  # a warm child: compiled once
        exec(compiled.get(path) or spec.loader.get_code(spec.name), module.__dict__)
        module.activate(config)
    except Exception as e:  # a broken harness must not look like the project's crash
        sys.stderr.write(f"tfrepro: trial harness failed to start: {e!r}\n")


def _tfrepro_chain():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.origin is None or os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_tfrepro_activate()
try:
    _tfrepro_chain()
except Exception as e:
    sys.stderr.write(f"tfrepro: the shadowed sitecustomize failed: {e!r}\n")
