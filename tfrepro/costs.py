"""Known costs: documented costs of features on the hardware they run on.

A slowdown whose culprits are all such features (mixed_float16 on a CPU,
a distribution strategy over one replica, XLA's
compile time on a CPU, eager execution) is what the documentation says to
expect, not a bug: the bisect result carries `known_cost` (Contract 4:
reason, source, fix), the CLI prints it, and `report` writes an explanation
with the fix instead of drafting a bug report (unless `--force`).

Pure data and a matcher over the trial's `extra["hardware"]`
(inside/devices.py's `hardware`: accelerators, the CPU's fp16/bf16
instructions, the most replicas in sync) and the features' descriptions. Imports only the
catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tfrepro import catalog

Hardware = Mapping[str, Any]


@dataclass(frozen=True)
class KnownCost:
    kind: str  # the catalog kind it applies to
    applies: Callable[[str, Hardware], bool]  # (feature description, hardware) -> whether it applies
    reason: str
    source: str
    fix: Callable[[Hardware], str]


def _fp16_on_plain_cpu(description: str, hw: Hardware) -> bool:
    """mixed_float16 with no accelerator, the CPU known (its flags read). A
    CPU's own float16 instructions do not make TensorFlow's CPU kernels fast:
    on an Intel Xeon with AVX512-FP16, TensorFlow 2.21 ran the journey's MLP
    80-123x slower under mixed_float16 (docs/benchmarks.md, 2026-12-03)."""
    return "bfloat16" not in description and not hw.get("accelerators") and hw.get("cpu_fp16") is not None


def _precision_fix(hw: Hardware) -> str:
    if hw.get("cpu_bf16"):
        return "use mixed_bfloat16 on this CPU (it has bfloat16 instructions), or keep float32"
    if hw.get("cpu_fp16"):
        return (
            "keep float32 on this CPU (its float16 instructions do not make TensorFlow's CPU kernels "
            "faster); use mixed_float16 on a GPU"
        )
    return "keep float32 on this CPU (it has neither float16 nor bfloat16 instructions); use mixed_float16 on a GPU"


COSTS: tuple[KnownCost, ...] = (
    KnownCost(
        "precision",
        _fp16_on_plain_cpu,
        "mixed_float16 on a CPU: TensorFlow computes float16 slowly there (emulated, even on a CPU with "
        "float16 instructions), the casts cost and nothing computes faster",
        "https://github.com/tensorflow/tensorflow/issues/45441 (expected: float16 is emulated on CPUs); "
        "https://www.tensorflow.org/guide/mixed_precision",
        _precision_fix,
    ),
    KnownCost(
        "strategy",
        lambda _d, hw: hw.get("replicas") == 1,
        "a distribution strategy over one replica: the cross-replica machinery runs and nothing is parallel",
        "https://www.tensorflow.org/guide/distributed_training",
        lambda _hw: "use the default strategy on one device; a strategy pays off with several replicas",
    ),
    KnownCost(
        "xla",
        lambda _d, hw: not hw.get("accelerators"),
        "XLA on a CPU: compile time, and XLA:CPU is often no faster than TensorFlow's own CPU kernels",
        "https://www.tensorflow.org/xla",
        lambda _hw: "leave XLA off on this CPU (jit_compile=False), or measure it on the accelerator it is for",
    ),
    KnownCost(
        "eager",
        lambda _d, _hw: True,
        "eager execution (run_eagerly / run_functions_eagerly) is slower than graph execution by design",
        "https://www.tensorflow.org/api_docs/python/tf/keras/Model#compile (run_eagerly: for debugging)",
        lambda _hw: "turn eager execution off outside debugging (run_eagerly=False)",
    ),
)


@dataclass(frozen=True)
class CostFound:
    """The culprits of a slowdown are known costs on this hardware: why, where
    it is documented, the fix (each joined over the culprits), the culprits."""

    reason: str
    source: str
    fix: str
    features: tuple[str, ...]

    def to_dict(self) -> dict[str, str | list[str]]:
        return {**asdict(self), "features": list(self.features)}


def known_cost(
    culprits: list[str] | tuple[str, ...],
    symptom: str | None,
    hardware: Hardware,
    describe: Callable[[str], str] = lambda _n: "",
) -> CostFound | None:
    """The known cost when every culprit of a slowdown is one on `hardware`;
    None otherwise."""
    if symptom != "slowdown" or not culprits:
        return None
    found = [
        next((c for c in COSTS if c.kind == catalog.kind_of(n) and c.applies(describe(n) or "", hardware)), None)
        for n in culprits
    ]
    if None in found:
        return None
    return CostFound(
        "; ".join(c.reason for c in found),
        "; ".join(c.source for c in found),
        "; ".join(c.fix(hardware) for c in found),
        tuple(culprits),
    )
