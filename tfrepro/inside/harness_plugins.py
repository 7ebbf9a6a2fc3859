"""The trial harness's plugin hook (used by `tfrepro check`).

Loaded by harness.py (`_side`) when the config names `plugins`.

The config's `plugins` are .py paths; before the script runs, each is
imported by path and `plugin.install(ctx)` is called, where `ctx` offers
  ctx.options              dict, the config's `plugin_options`
  ctx.record(key, value)   JSON-serializable; ends up in TrialResult.extra[key]
  ctx.add_fit_hook(fn)     fn(model, args, kwargs) just before each Model.fit
  ctx.add_end_hook(fn)     fn(models) at the end (also after a step-cap stop),
                           models = the Keras models created during the trial
  ctx.after_import(name, fn)  fn(module) right after the script imports the
                           top-level module `name` (e.g. "tensorflow")
  ctx.replicas(fits=True)  the most replicas in sync so far (devices.replicas)
  ctx.tf_settings()        op determinism, eager functions (devices.tf_settings)
A plugin that raises is recorded in extra["harness_errors"]; it never fails
the trial.
"""

from __future__ import annotations

import json
import sys

H = None  # the harness core module, set by harness.py


class PluginContext:
    def __init__(self, options: dict) -> None:
        self.options = dict(options)
        self.add_fit_hook = H.S.fit_hooks.append
        self.add_end_hook = H.S.end_hooks.append
        # Or now if it is imported (in a warm child, where it was imported before the trial: at the
        # script's first import of it, as cold).
        self.after_import = H._FINDER.add

    def record(self, key: str, value) -> None:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            value = repr(value)
        H.S.extra[key] = value

    def replicas(self, fits: bool = True) -> int | None:
        """None when unknown (devices.py did not load)."""
        return H._DEVICES.replicas(H.S.extra, fits) if H._DEVICES is not None else None

    def tf_settings(self) -> dict:
        """Those TensorFlow can report now; {} before it is imported."""
        tf = sys.modules.get("tensorflow")
        got = H._DEVICES.tf_settings(tf) if H._DEVICES is not None and tf is not None else {}
        return {k: v for k, v in got.items() if isinstance(v, bool)}
