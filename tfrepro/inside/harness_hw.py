"""What the trial ran on, for the known costs of features on their hardware
(loaded by path by harness.py at the end of a trial; stdlib + the
TensorFlow the script imported, no tfrepro import): accelerators seen, the
CPU's float16/bfloat16 instructions (Linux /proc/cpuinfo flags), and the
most replicas in sync it ran with (devices.replicas)."""

from __future__ import annotations

import contextlib
import sys

FP16_FLAGS = ("avx512_fp16", "amx_fp16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpu_flags() -> set[str]:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    return set()


def hardware(replicas: int | None) -> dict:
    out: dict = {"replicas": replicas}
    flags = _cpu_flags()
    if flags:
        out["cpu_fp16"] = any(f in flags for f in FP16_FLAGS)
        out["cpu_bf16"] = any(f in flags for f in BF16_FLAGS)
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        with contextlib.suppress(Exception):
            out["accelerators"] = sorted(
                {d.device_type for d in tf.config.list_logical_devices() if d.device_type != "CPU"}
            )
    return out
