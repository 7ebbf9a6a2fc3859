"""The `memory` symptom (Contract 3): pure judgement of a trial's memory
against the baseline's runs; `classify.symptoms` calls it.

A trial shows `memory` when

- it was killed for memory: an out-of-memory error in its crash line
  (`ResourceExhaustedError`, `MemoryError`, "OOM when allocating",
  `std::bad_alloc`) or a SIGKILL it did not get from our timeout (the
  kernel's OOM killer: exit -9, or 137 through a shell) - `is_oom`;
- its peak (process RSS; each device's peak where there is a device) is at
  least `memory` x the largest peak of the baseline runs; or
- it grows steadily and the baseline does not: the robust slope of RSS over
  the steady steps (Theil-Sen, `inside/memory.py`) minus the baseline's
  largest (non-negative) slope is (a) significant - Kendall's tau of RSS
  against the step at z >= 3 - and (b) large in absolute terms: over 10
  steps, more than 1% of the trial's peak, and over the trial's steps more
  than `MIN_GROWTH_BYTES`. Measured on the healthy example: ~16 KB/step of
  allocator drift at tau 0.9 (significant, but 40x under the limit). The
  floor is above an allocator's staircase: a baseline's arenas take a
  tensor-sized chunk now and then and keep it (weight_history_memory's
  baseline, 1024x1024 weights: up to four 4.2 MB steps, 25 MB, over 50
  steps, warm and cold alike), which the 1%-of-peak limit alone (19 MB over
  50 steps at its 380 MB peak) took for a leak.

Memory is the trial's anonymous resident memory (`inside/memory.py`), the
same for a warm child and a cold process of the same script.

A decision near a threshold (peak ratio within 10%, growth within 2x of the
limit with tau at z >= 2) is `close`: the engine runs more repeats of that
configuration before it trusts it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tfrepro.inside.memory import steady_growth, steady_part, tau_z
from tfrepro.trials.values import TrialResult

MIN_GROWTH_BYTES = 32 * 1024 * 1024  # over the trial's steps
GROWTH_SHARE_PER_10_STEPS = 0.01  # of the peak
GROWTH_Z = 3.0
CLOSE_RATIO = 1.1
_OOM_LINE = re.compile(
    r"ResourceExhaustedError|MemoryError|OutOfMemory|OOM when allocating|std::bad_alloc"
    r"|out of memory|Cannot allocate memory",
    re.IGNORECASE,
)
_SIGKILL = (-9, 137)


@dataclass(frozen=True)
class MemoryDecision:
    shows: bool
    close: bool = False
    reason: str = ""
    peak_ratio: float | None = None
    growth: float | None = None  # bytes/step, the baseline's subtracted
    growth_limit: float | None = None  # bytes/step above which growth counts
    growth_z: float | None = None


def is_oom(result: TrialResult) -> bool:
    """Killed for memory, not by our timeout (see the module docstring)."""
    if result.timed_out or not result.crashed:
        return False
    return bool(result.error and _OOM_LINE.search(result.error)) or result.exit_code in _SIGKILL


def growth_of(result: TrialResult) -> tuple[float | None, float, int]:
    """(growth in bytes/step, tau z-score, steady points) from the RSS series;
    the harness's `growth_per_step` (z unknown: 0) when there is no series."""
    series = list(result.rss_per_step)
    if len(series) >= 6:
        try:  # the harness writes an int; a stored result read back may hold anything (a miss, not a crash)
            stride = max(1, int((result.extra.get("memory") or {}).get("stride") or 1))
        except (TypeError, ValueError):
            stride = 1
        slope, tau = steady_growth(series, stride)
        n = len(steady_part(series, stride)[0])
        return slope, tau_z(tau, min(n, 512)), n
    return result.growth_per_step, 0.0, 0


def decide_memory(result: TrialResult, baselines: Sequence[TrialResult], threshold: float) -> MemoryDecision:
    """Does `result` show the memory symptom against the `baselines` (the
    baseline configuration's runs)? Pure; see the module docstring."""
    if is_oom(result):
        return MemoryDecision(True, reason=f"killed for memory: {result.error or result.exit_code}")
    if result.crashed or result.timed_out or result.could_not_run:
        return MemoryDecision(False, reason="no memory measurement of a trial that did not finish")
    measured = [b for b in baselines if b.peak_rss_bytes and not (b.crashed or b.timed_out)]
    if not measured or not result.peak_rss_bytes:
        return MemoryDecision(False, reason="no memory measurement to compare")
    # each peak (RSS, device) over the baselines' largest; the larger ratio counts
    bases = {p: max(getattr(b, p) or 0 for b in measured) for p in ("peak_rss_bytes", "device_peak_bytes")}
    ratio = max((getattr(result, p) / base for p, base in bases.items() if getattr(result, p) and base), default=None)
    growth, z, n = growth_of(result)
    base_growth = max((max(g, 0.0) for g in (growth_of(b)[0] for b in measured) if g is not None), default=0.0)
    excess = None if growth is None else growth - base_growth
    steps = max(result.steps_run, n, 1)
    limit = max(GROWTH_SHARE_PER_10_STEPS * result.peak_rss_bytes / 10.0, MIN_GROWTH_BYTES / steps)
    grows = excess is not None and excess > limit and z >= GROWTH_Z
    high = ratio is not None and ratio >= threshold
    # Marginal: a measure near its threshold, and none past it by a clear
    # margin (a peak 1.45x with a 4x growth is a leak, not a near miss).
    decisive = (ratio is not None and ratio >= threshold * CLOSE_RATIO) or (grows and excess > 2 * limit)
    close = not decisive and (
        (ratio is not None and threshold / CLOSE_RATIO <= ratio < threshold * CLOSE_RATIO)
        or (excess is not None and limit / 2 <= excess <= 2 * limit and z >= GROWTH_Z - 1)
    )
    why = []
    if high:
        why.append(f"peak {ratio:.2f}x the baseline's (threshold {threshold:g}x)")
    if grows:
        why.append(
            f"grows {excess / 1e6:.2f} MB/step more than the baseline (limit {limit / 1e6:.2f} MB/step, z {z:.1f})"
        )
    return MemoryDecision(high or grows, close, "; ".join(why) or "within bounds", ratio, excess, limit, round(z, 2))
