"""Devices and what actually ran, inside the trial process (no tfrepro import).

Loaded by path by harness.py when TensorFlow is imported (in a warm child: at
the script's first import of it, as in a cold process), before the script's
first op:

- `split(tf, config, extra)`: `[trial] replicas = N` / `--replicas N` splits
  the CPU into N logical CPU devices, or one GPU into N logical GPUs with a
  memory limit each, so that `MirroredStrategy()` in the script sees N
  replicas. A machine with N real GPUs keeps them (nothing is split).
- `watch_strategies(tf, extra)`: every distribution strategy the script
  creates is recorded (class, replicas in sync, devices).
- `pin_compile(kwargs, config)` / `record_compile(...)` / `record_fit(...)`:
  Keras 3's `jit_compile="auto"` (the default) pinned to the failing
  configuration's resolution (`config["jit_auto"]`), and each compile/fit's
  resolved compile mode, replicas in sync and precision policy recorded.

`summary(extra)` turns the records into the result's fields (`compile_modes`,
`replicas_in_sync`, `precision_policy`, `devices`); `hardware(extra)`, into
`extra["hardware"]` (what the trial ran on, for `catalog.known_cost`).
"""

from __future__ import annotations

import contextlib
import importlib
import sys

# A logical GPU's memory limit when one GPU is split (MiB).
GPU_REPLICA_MB = 2048

SPLIT_TOO_LATE = (
    "--replicas {n}: the devices were already initialised when TensorFlow was set up "
    "({error}); the trial ran with the devices as they were"
)


def split(tf, config: dict, extra: dict) -> None:
    """N logical devices out of one (see the module docstring); records what was done."""
    n = int(config.get("replicas") or 0)
    if n <= 1:
        return
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= n:
        extra["replica_devices"] = f"{len(gpus)} real GPUs (nothing split)"
        return
    try:
        if gpus:
            conf = [tf.config.LogicalDeviceConfiguration(memory_limit=GPU_REPLICA_MB) for _ in range(n)]
            tf.config.set_logical_device_configuration(gpus[0], conf)
            extra["replica_devices"] = f"1 GPU split into {n} logical GPUs of {GPU_REPLICA_MB} MiB"
            # A split GPU refuses `set_memory_growth` (ValueError): the script's
            # call is ignored, with a warning, rather than crash the trial.
            tf.config.experimental.set_memory_growth = lambda device, enable: warn(extra, MEMORY_GROWTH_IGNORED)
        else:
            cpus = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
            extra["replica_devices"] = f"the CPU split into {n} logical CPUs"
    except (RuntimeError, ValueError) as e:
        warn(extra, SPLIT_TOO_LATE.format(n=n, error=str(e).splitlines()[0]))


MEMORY_GROWTH_IGNORED = (
    "--replicas: the script's set_memory_growth was ignored: TensorFlow refuses memory growth on a "
    "GPU split into logical devices (each has a fixed memory limit instead)"
)


def warn(extra: dict, text: str) -> None:
    """`text` once in the result's warnings (here and harness_keras.py's compile)."""
    if text not in (warnings := extra.setdefault("warnings", [])):
        warnings.append(text)


def watch_strategies(tf, extra: dict) -> None:
    """Record every strategy the script builds (the default strategy aside)."""
    base = tf.distribute.Strategy
    if getattr(base, "_tfrepro_watched", False):
        return
    orig = base.__init__

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        if type(self).__name__.startswith("_Default"):
            return
        with contextlib.suppress(Exception):
            devices = [str(d) for d in getattr(self.extended, "worker_devices", ())]
            extra.setdefault("strategies", []).append(
                {"strategy": type(self).__name__, "replicas": int(self.num_replicas_in_sync), "devices": devices}
            )

    base.__init__ = __init__
    base._tfrepro_watched = True


def pin_compile(args: tuple, kwargs: dict, config: dict) -> tuple[dict, object, bool]:
    """(`kwargs` with a requested "auto" replaced by the pinned value
    (`config["jit_auto"]`, True or False), the `jit_compile` the Keras 3
    `compile` call asked for ("auto" when not given; the 8th positional
    argument of `Trainer.compile`), whether it was pinned). Pure."""
    requested = kwargs.get("jit_compile", args[7] if len(args) > 7 else "auto")
    pin = config.get("jit_auto")
    if pin is None or requested != "auto" or kwargs.get("run_eagerly") or len(args) > 7:
        return kwargs, requested, False
    return {**kwargs, "jit_compile": bool(pin)}, requested, True


def precision_policy(keras, model=None) -> str | None:
    """`model`'s precision policy, else the global one of `keras` (the
    script's Keras module, harness.keras_module; envprobe.runtime: the one
    `tf.keras` is; None: not imported)."""
    name = getattr(getattr(model, "dtype_policy", None), "name", None)
    if name is not None:
        return str(name)
    try:
        return str(keras.mixed_precision.global_policy().name)
    except Exception:
        return None


def read(f):
    """f(), or "unavailable: <error type>" where it raises: a setting that
    cannot be read never hides the others (here and envprobe.runtime)."""
    try:
        return f()
    except Exception as e:
        return f"unavailable: {type(e).__name__}"


def tf_settings(tf) -> dict:
    """Op determinism and eager `tf.function`s, as TensorFlow has them now:
    the one reading, for the plugins (`ctx.tf_settings()`) and
    envprobe.runtime (each a bool, or what `read` says)."""
    return {  # op determinism: no public getter in TensorFlow 2.x
        "op_determinism": read(
            lambda: bool(importlib.import_module("tensorflow.python.framework.config").is_op_determinism_enabled())
        ),
        "run_functions_eagerly": read(lambda: bool(tf.config.functions_run_eagerly())),
    }


def record_compile(model, extra: dict, requested, pinned: bool) -> None:
    """One `compile`: what was asked, what Keras resolved, whether we pinned it."""
    requested = requested if isinstance(requested, (bool, str)) else repr(requested)
    _record("compile_modes", "compile", model, extra, requested=requested, pinned=pinned)


def record_fit(model, extra: dict, keras) -> None:
    """One `fit`: the compile mode it ran, replicas in sync, precision policy."""
    try:
        n = int(model.distribute_strategy.num_replicas_in_sync)
    except Exception:  # no strategy: None
        n = None
    _record("fits", "fit", model, extra, replicas=n, precision_policy=precision_policy(keras, model))


def _record(key: str, kind: str, model, extra: dict, **fields) -> None:
    """`extra[key]` gets the call's tag (`kind#N`), the model's resolved
    `jit_compile` (None if unknown; `_jit_compile` first: Keras 3's property
    resolves "auto" when read), `run_eagerly` and `fields`."""
    jit = getattr(model, "_jit_compile", None)
    if jit is None:
        with contextlib.suppress(Exception):
            jit = getattr(model, "jit_compile", None)
    calls = extra.setdefault(key, [])
    calls.append(
        {
            "call": f"{kind}#{len(calls) + 1}",
            "jit_compile": bool(jit) if jit is not None else None,
            "run_eagerly": bool(getattr(model, "run_eagerly", False)),
            **fields,
        }
    )


def replicas(extra: dict, fits: bool = True) -> int | None:
    """The most replicas in sync the trial ran with: of every strategy the
    script built and (`fits`) of every fit's model (under no strategy: 1);
    None when there was neither. The one count: the result's
    `replicas_in_sync`, the hardware's `replicas` (`hardware`) and the
    plugins' `ctx.replicas()` (localize_plugin.py asks for the strategies'
    alone)."""
    counts = [s["replicas"] for s in extra.get("strategies") or []]
    if fits:
        counts += [f["replicas"] for f in extra.get("fits") or [] if f.get("replicas")]
    return max(counts) if counts else None


def summary(extra: dict, keras) -> dict:
    """The result's fields for what actually ran (see TrialResult)."""
    fits = extra.get("fits") or []
    modes = [*(extra.get("compile_modes") or []), *fits]
    policy = next((f["precision_policy"] for f in fits if f.get("precision_policy")), None)
    # the devices the script's last strategy ran on; else the logical devices TensorFlow has
    last = next((s["devices"] for s in reversed(extra.get("strategies") or []) if s.get("devices")), None)
    return {
        "compile_modes": modes,
        "replicas_in_sync": replicas(extra),
        "precision_policy": policy if policy is not None else precision_policy(keras),
        "devices": list(last) if last else [d.name for d in _logical() or []],
    }


def _logical() -> list | None:
    """TensorFlow's logical devices; None where TensorFlow is not imported or cannot say."""
    tf = sys.modules.get("tensorflow")
    try:
        return list(tf.config.list_logical_devices()) if tf is not None else None
    except Exception:
        return None


# -- what it ran on: the known costs of features on their hardware (tfrepro/catalog.py) --

FP16_FLAGS = ("avx512_fp16", "amx_fp16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def hardware(extra: dict) -> dict:
    """The result's extra["hardware"], at the end of a trial: the most
    replicas in sync, the CPU's float16/bfloat16 instructions (Linux
    /proc/cpuinfo flags), the accelerators TensorFlow saw."""
    out: dict = {"replicas": replicas(extra)}
    flags = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    if flags:
        out["cpu_fp16"] = any(f in flags for f in FP16_FLAGS)
        out["cpu_bf16"] = any(f in flags for f in BF16_FLAGS)
    logical = _logical()
    if logical is not None:
        out["accelerators"] = sorted({d.device_type for d in logical if d.device_type != "CPU"})
    return out
