"""What actually ran, across a hunt (Contract 3): Keras 3's `jit_compile="auto"`
pinned to what it resolved to in the failing configuration, the trials that
still compiled differently, and the one-replica note. Pure: trial results in,
values out.

Keras 3 resolves "auto" to XLA on a GPU only when no distribution strategy is
active (`Trainer._resolve_auto_jit_compile`), so switching MirroredStrategy
off would switch XLA on: two features would move when one is toggled. The
failing configuration's resolution is the one every other trial gets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from tfrepro.trials.values import TrialResult


def resolved(result: TrialResult) -> tuple[bool | None, ...]:
    """The compile mode each compile of the trial resolved to, in order."""
    return tuple(m.get("jit_compile") for m in result.compile_modes if str(m.get("call", "")).startswith("compile#"))


def pin_for(failing: TrialResult) -> bool | None:
    """The value a detected "auto" resolved to in the failing configuration
    (its first compile that asked for "auto"), or None: nothing to pin."""
    auto = (m.get("jit_compile") for m in failing.compile_modes if m.get("requested") == "auto")
    return next((j for j in auto if isinstance(j, bool)), None)


def auto_differs(result: TrialResult, pin: bool) -> bool:
    """A trial run before the pin was known whose "auto" resolved otherwise
    (it must run again, pinned)."""
    return any(
        m.get("requested") == "auto" and not m.get("pinned") and m.get("jit_compile") not in (None, pin)
        for m in result.compile_modes
    )


class CompileDiff(TypedDict):
    """A configuration whose resolved jit_compile differs from the failing one's."""

    configuration: list[str]
    jit_compile: list[str]
    failing_jit_compile: list[str]


def differing(failing: TrialResult | None, trials: Iterable[tuple[tuple[str, ...], TrialResult]]) -> list[CompileDiff]:
    """The trials whose resolved compile modes differ from the failing
    configuration's (a feature toggled `jit_compile` itself, say): each with
    its configuration and both modes; none when the failing one did not run."""
    want = resolved(failing) if failing is not None else ()
    out: dict[tuple[str, ...], CompileDiff] = {}  # the first trial of each configuration
    for enabled, result in trials:
        if want and (got := resolved(result)) and got != want:
            out.setdefault(
                enabled, CompileDiff(configuration=list(enabled), jit_compile=list(got), failing_jit_compile=list(want))
            )
    return list(out.values())


def one_replica_note(failing: TrialResult, replicas: int | None) -> str | None:
    """Why a strategy hunt may have seen nothing: the failing configuration
    built a multi-device strategy that had a single replica."""
    strategies = [s for s in failing.extra.get("strategies") or [] if s.get("strategy") != "OneDeviceStrategy"]
    if replicas or not strategies or any(s.get("replicas", 1) > 1 for s in strategies):
        return None
    names = sorted({s.get("strategy", "a strategy") for s in strategies})
    return (
        f"only one replica was available: {', '.join(names)} ran on a single device, so it computed "
        "what the default strategy computes; rerun with --replicas 2 (or [trial] replicas = 2 in "
        "tfrepro.toml) to split the device into 2 logical ones and test it with 2 replicas"
    )
