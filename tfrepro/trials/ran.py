"""What actually ran in a trial, in words (Contract 3: compile mode, replicas
in sync, precision policy, devices). Pure."""

from __future__ import annotations

from tfrepro.trials.values import TrialResult


def what_ran(result: TrialResult) -> str | None:
    """One line, e.g. "ran: fit#1 jit_compile=False; 2 replicas in sync; float32; 2 devices"."""
    parts = []
    modes = [m for m in result.compile_modes if str(m.get("call", "")).startswith("fit#")]
    modes = modes or list(result.compile_modes)
    if modes:
        parts.append(
            ", ".join(
                f"{m.get('call')} jit_compile={m.get('jit_compile')}" + (" (auto, pinned)" if m.get("pinned") else "")
                for m in modes
            )
        )
    if result.replicas_in_sync:
        n = result.replicas_in_sync
        parts.append(f"{n} replica{'s' if n != 1 else ''} in sync")
    if result.precision_policy:
        parts.append(result.precision_policy)
    if result.devices:
        parts.append(f"{len(result.devices)} device{'s' if len(result.devices) != 1 else ''}")
    return "ran: " + "; ".join(parts) if parts else None
