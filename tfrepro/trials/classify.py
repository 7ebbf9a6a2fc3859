"""The classifier: what a trial shows, relative to its reference (pure, no I/O).

Two questions live here, kept apart because they need different evidence:

- `symptoms` / `primary`: one trial against its reference. NaN, crash and
  timeout are facts of the trial alone; a mismatch compares the per-step losses
  with the reference, the same configuration with only its `affects_loss`
  features on (the baseline when it has none); memory compares with the
  baseline's runs (`decide_memory`).
- `sequential_slowdown`: a slowdown is never read off one trial, but off
  timing pairs (a candidate between two baseline trials); that decision
  lives in `trials/slowdown.py`.

And, over a configuration's runs: why an end could not be measured
(`ends_reason`), and which of the script's training calls a configuration
is slower in or a symptom shows in (`slower_calls`, `symptom_call`).
"""

from __future__ import annotations

import difflib
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tfrepro.inside.memory import steady_growth, steady_part, tau_z
from tfrepro.settings import WARMUP_STEPS, SymptomSettings
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import SYMPTOM_ORDER, Verdict

# Denominator floor for relative loss deviations, as a fraction of the
# reference's largest |loss|: a loss that converges towards 0 would otherwise
# turn a tiny absolute wobble into an enormous relative one.
_REL_FLOOR = 1e-3


# --------------------------------------------------------------------------- losses


def loss_deviation(losses: Sequence[float], reference: Sequence[float]) -> float:
    """Largest relative deviation of `losses` from `reference`, step by step.

    Compared over the steps both have (a trial may stop early, e.g. on a NaN,
    which is a symptom of its own). Non-finite values count as an infinite
    deviation; no common step gives 0.0 (nothing to compare).
    """
    n = min(len(losses), len(reference))
    scale = max((abs(x) for x in reference[:n] if math.isfinite(x)), default=0.0)
    floor = max(_REL_FLOOR * scale, 1e-12)
    worst = 0.0
    for a, b in zip(losses[:n], reference[:n]):
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        worst = max(worst, abs(a - b) / max(abs(b), floor))
    return worst


def measure_noise(first: TrialResult, second: TrialResult) -> float:
    """The loss noise inherent to the project: the relative deviation between
    two runs of the same configuration (the baseline run twice). 0.0 under
    full determinism."""
    d = max(
        loss_deviation(first.losses, second.losses),
        loss_deviation(second.losses, first.losses),
    )
    return d if math.isfinite(d) else 0.0


def mismatch_tolerance(settings: SymptomSettings, noise: float) -> float:
    """The tolerance never falls below the measured noise: a project that is not
    reproducible to 5% cannot blame a feature for a 5% difference."""
    return max(settings.mismatch, noise)


# --------------------------------------------------------------------------- memory
# The `memory` symptom (Contract 3): pure judgement of a trial's memory
# against the baseline's runs; `symptoms` calls it.
#
# A trial shows `memory` when
#
# - it was killed for memory: an out-of-memory error in its crash line
#   (`ResourceExhaustedError`, `MemoryError`, "OOM when allocating",
#   `std::bad_alloc`) or a SIGKILL it did not get from our timeout (the
#   kernel's OOM killer: exit -9, or 137 through a shell) - `is_oom`;
# - its peak (process RSS; each device's peak where there is a device) is at
#   least `memory` x the largest peak of the baseline runs; or
# - it grows steadily and the baseline does not: the robust slope of RSS over
#   the steady steps (Theil-Sen, `inside/memory.py`) minus the baseline's
#   largest (non-negative) slope is (a) significant - Kendall's tau of RSS
#   against the step at z >= 3 - and (b) large in absolute terms: over 10
#   steps, more than 1% of the trial's peak, and over the trial's steps more
#   than `MIN_GROWTH_BYTES`. Measured on the healthy example: ~16 KB/step of
#   allocator drift at tau 0.9 (significant, but 40x under the limit). The
#   floor is above an allocator's staircase: a baseline's arenas take a
#   tensor-sized chunk now and then and keep it (weight_history_memory's
#   baseline, 1024x1024 weights: up to four 4.2 MB steps, 25 MB, over 50
#   steps, warm and cold alike), which the 1%-of-peak limit alone (19 MB over
#   50 steps at its 380 MB peak) took for a leak.
#
# Memory is the trial's anonymous resident memory (`inside/memory.py`), the
# same for a warm child and a cold process of the same script.
#
# A decision near a threshold (peak ratio within 10%, growth within 2x of the
# limit with tau at z >= 2) is `close`: the engine runs more repeats of that
# configuration before it trusts it.

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
    """Killed for memory, not by our timeout (see the memory section above)."""
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
    baseline configuration's runs)? Pure; see the memory section above."""
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


# --------------------------------------------------------------------------- verdicts


def symptoms(
    result: TrialResult,
    *,
    reference: TrialResult | None,
    settings: SymptomSettings,
    noise: float = 0.0,
    baselines: Sequence[TrialResult] = (),
) -> frozenset[Verdict]:
    """Every symptom one trial shows (a NaN trial may also have crashed).

    `reference` is the trial the losses are compared with; None skips the
    mismatch check. `baselines` (the baseline configuration's runs) are what
    memory is compared with (`decide_memory`); an out-of-memory kill is MEMORY,
    never CRASH, with or without them. Slowdown is never decided here (see
    `decide_slowdown`).
    """
    if result.could_not_run:  # lost by the executor: says nothing about the features
        return frozenset({Verdict.UNTESTABLE})
    found: set[Verdict] = set()
    if settings.nan and result.nonfinite:
        found.add(Verdict.NAN)
    if result.timed_out:
        found.add(Verdict.TIMEOUT)
    elif is_oom(result):
        found.add(Verdict.MEMORY)
    elif result.crashed:
        found.add(Verdict.CRASH)
    if reference is not None and not found:
        # A trial that stopped on NaN or died differs from any reference by
        # construction; reporting that as a mismatch too would only blur it.
        tol = mismatch_tolerance(settings, noise)
        if loss_deviation(result.losses, reference.losses) > tol:
            found.add(Verdict.MISMATCH)
    if baselines and not found - {Verdict.MISMATCH} and decide_memory(result, baselines, settings.memory).shows:
        found.add(Verdict.MEMORY)
    return frozenset(found)


def primary(shown: frozenset[Verdict] | set[Verdict], target: Verdict | None = None) -> Verdict:
    """One verdict out of several: the hunted `target` when shown (the search is
    locked onto one symptom), otherwise the first in `SYMPTOM_ORDER`, else OK."""
    if target is not None and target in shown:
        return target
    return next((v for v in (*SYMPTOM_ORDER, Verdict.UNTESTABLE) if v in shown), Verdict.OK)


def first_steps(result: TrialResult, steps: int) -> TrialResult:
    """The loss view of a timing trial that ran past `steps` (its time budget):
    only the first `steps` losses count for nan and mismatch."""
    if len(result.losses) <= steps:
        return result
    bad = result.first_nonfinite_step
    return replace(
        result, losses=result.losses[:steps], first_nonfinite_step=bad if bad is not None and bad <= steps else None
    )


# --------------------------------------------------------------------------- untestable ends
# Untestable, not healthy (Contract 3/4): a trial that ran no training
# step, or a symptom that could not be measured, says so with its reason and
# the way out, instead of passing for "none" (measured, and healthy). The
# bisection engine and the range modes (commits, versions) ask here before
# they answer `none`.

NO_STEP_WAY_OUT = (
    "train with Model.fit, or a loop that calls the optimizer's apply_gradients, "
    "or print one line `step=<int> loss=<float>` per training step; "
    "`tfrepro check` shows what the trial saw"
)


def no_step_reason(runs: Sequence[TrialResult], end: str) -> str | None:
    """Why `end` ("the failing configuration", "the baseline", "the bad end
    abc123") could not be measured, when none of its runs ran a training
    step; None when one did (or one crashed or timed out: that is measured)."""
    if not runs or any(  # a training step, or another measured outcome (a crash or a timeout is one)
        t.steps_run or t.losses or t.step_times or t.crashed or t.timed_out or t.could_not_run or t.nonfinite
        for t in runs
    ):
        return None
    seen = runs[0].mode
    how = (
        f" (the harness saw {seen!r} training)"
        if seen not in ("none", "")
        else " (no Model.fit step and no printed step line: a loop the harness cannot see?)"
    )
    return f"no training step ran in {end}{how}: nothing to measure; {NO_STEP_WAY_OUT}"


def unmeasured(symptom: Verdict | None, base: Sequence[TrialResult], failing: Sequence[TrialResult]) -> str | None:
    """Why the symptom asked for could not be measured on both ends (None:
    it could). A slowdown needs steps past the warm-up on each end, a
    mismatch losses on each end, a memory verdict a peak on each end."""
    for name, runs in (("the baseline", base), ("the failing configuration", failing)):
        if not runs:
            continue
        if symptom is Verdict.SLOWDOWN and not any(len(t.step_times) > WARMUP_STEPS for t in runs):
            return (
                f"the slowdown could not be measured: {name} ran no step past the "
                f"{WARMUP_STEPS} warm-up steps; let each trial run more steps (--steps, or a longer fit)"
            )
        if symptom is Verdict.MISMATCH and not any(t.losses for t in runs):
            return (
                f"the mismatch could not be measured: {name} recorded no loss; "
                "compile the model with a loss, or print `step=<int> loss=<float>`"
            )
        if symptom is Verdict.MEMORY and not any(t.peak_rss_bytes or t.device_peak_bytes for t in runs):
            return f"memory could not be measured: {name} recorded no peak memory"
    return None


def ends_reason(
    base: Sequence[TrialResult],
    failing: Sequence[TrialResult],
    symptom: Verdict | None,
    *,
    failed: bool,
    names: tuple[str, str] = ("the baseline (every feature off)", "the failing configuration (every feature on)"),
) -> str | None:
    """Why a bisection cannot answer from its two ends, in every mode
    (`names`: the good end's and the failing end's, as the reason says
    them): unless the failing end `failed` (a crash, NaN or timeout is
    measured), an end ran no training step (the failing end first: every
    other symptom is measured against the good end); or the symptom asked
    for cannot be measured."""
    reason = None if failed else no_step_reason(failing, names[1]) or no_step_reason(base, names[0])
    return reason or unmeasured(symptom, base, failing)


# --------------------------------------------------------------------------- training calls
# Every training call is a step source (Contract 3): a trial records the
# script's calls (`fit#1`, `fit#2`, ..., with file:line) in `extra["calls"]`,
# each the steps from its start to the next call's: which calls a
# configuration is slower in (what a timing trial then times), and which
# call a symptom shows in (what the answer names).


@dataclass(frozen=True)
class Call:
    tag: str  # "fit#2"
    where: str  # "train.py:120"
    start: int  # steps before it (0-based index of its first step)
    end: int  # one past its last step

    @property
    def text(self) -> str:
        return f"{self.tag} ({self.where})" if self.where and self.where != "?" else self.tag


def calls_of(result: TrialResult) -> list[Call]:
    """The training calls of a trial, in order, with their step ranges."""
    raw = result.extra.get("calls") or []
    n = max(len(result.step_times), result.steps_run)
    out: list[Call] = []
    for i, c in enumerate(raw):
        try:
            start = int(c["start"])
            end = int(raw[i + 1]["start"]) if i + 1 < len(raw) else n
            out.append(Call(str(c["call"]), str(c.get("where") or ""), start, max(start, end)))
        except (KeyError, TypeError, ValueError):
            return []
    return out


def _call_median(result: TrialResult, tag: str) -> float | None:
    for c in calls_of(result):
        if c.tag == tag:
            times = result.step_times[c.start : c.end]
            steady = times[WARMUP_STEPS:] if len(times) > WARMUP_STEPS + 1 else times[1:]
            return statistics.median(steady) if steady else None
    return None


def per_call_ratios(base: Sequence[TrialResult], failing: Sequence[TrialResult]) -> dict[str, float]:
    """Per call of the failing configuration: its fastest run's typical step
    over the baseline's fastest (calls both ends ran, with steps)."""
    tags = [c.tag for c in calls_of(failing[0])] if failing else []
    out: dict[str, float] = {}
    for tag in tags:
        f = [m for m in (_call_median(t, tag) for t in failing) if m is not None]
        b = [m for m in (_call_median(t, tag) for t in base) if m is not None]
        if f and b and min(b) > 0:
            out[tag] = min(f) / min(b)
    return out


def slower_calls(base: Sequence[TrialResult], failing: Sequence[TrialResult], screen: float) -> tuple[str, ...]:
    """The calls a timing trial should time: those where the failing
    configuration ran at least `screen` times slower than the baseline and
    at least halfway to the slowest call's ratio, in order; () (time the first call, as a single-call script has it) when
    there is one call, none stands out, or only the first does."""
    ratios = per_call_ratios(base, failing)
    if len(ratios) < 2:
        return ()
    # the calls near the slowest one: noise on a loaded machine lifts the others a little
    bar = max(screen, 1 + (max(ratios.values()) - 1) / 2)
    slow = tuple(t for t, r in ratios.items() if r >= bar)
    first = next(iter(ratios))
    return () if slow in ((), (first,)) else slow


def original_line(annotated: str, original: str, line: int) -> int:
    """Line `line` of a zero-edit variant (the user's file with feature
    markers added in memory) as a line of the user's file: the same line
    where it is unchanged, else the first line of the statement it replaces."""
    a, b = annotated.splitlines(), original.splitlines()
    for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i1 < line <= i2 or (i1 == i2 == line - 1):
            return j1 + (line - i1) if tag == "equal" else j1 + 1
    return line


def where_mapper(texts: Mapping[str, tuple[str, str]]) -> Callable[[str], str]:
    """file:line of a variant -> of the user's file, for the files whose
    variant text differs from the file (relpath -> (variant, original))."""

    def map_where(where: str) -> str:
        rel, _, num = where.rpartition(":")
        if rel in texts and num.isdigit():
            return f"{rel}:{original_line(*texts[rel], int(num))}"
        return where

    return map_where


def symptom_call(
    result: TrialResult | None,
    symptom: Verdict | None,
    timed: Sequence[str] = (),
    where: Callable[[str], str] = str,
) -> str | None:
    """Where the symptom shows, as the answer names it: the call of the first
    non-finite loss for a NaN, the calls timed for a slowdown (the first call
    when none was chosen); None for a single-call script or no call seen."""
    if result is None or symptom is None:
        return None
    calls = [replace(c, where=where(c.where)) for c in calls_of(result)]
    if len(calls) < 2:
        return None
    if symptom is Verdict.NAN and result.first_nonfinite_step is not None:
        step = result.first_nonfinite_step
        return next((c.text for c in calls if c.start < step <= c.end), None)
    if symptom is Verdict.SLOWDOWN:
        wanted = list(timed) or [calls[0].tag]
        return ", ".join(c.text for c in calls if c.tag in wanted) or None
    return None
