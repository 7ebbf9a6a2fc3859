"""The classifier: what a trial shows, relative to its reference (pure, no I/O).

Two questions live here, kept apart because they need different evidence:

- `symptoms` / `primary`: one trial against its reference. NaN, crash and
  timeout are facts of the trial alone; a mismatch compares the per-step losses
  with the reference, the same configuration with only its `affects_loss`
  features on (the baseline when it has none).
- `sequential_slowdown`: a slowdown is never read off one trial, but off
  timing pairs (a candidate between two baseline trials); that decision
  lives in `trials/slowdown.py`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tfrepro.settings import SymptomSettings
from tfrepro.trials.memcheck import decide_memory, is_oom
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
    memory is compared with (`memcheck.py`); an out-of-memory kill is MEMORY,
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


def stopped_early(result: TrialResult, reference: TrialResult | None, steps: int | None = None) -> bool:
    """A trial that ended cleanly (no crash, timeout or NaN) with fewer training
    steps than its reference ran (at most `steps`): a feature that makes the
    script exit early (`sys.exit(0)` after 3 of 40 steps) is not healthy. A
    `fit` that one of the script's callbacks stopped (`model.stop_training`:
    EarlyStopping and its kin) ended as the script asked, not early; nor did
    a trial the harness itself stopped (a timing trial at its budget)."""
    if reference is None or result.crashed or result.timed_out or result.could_not_run or result.nonfinite:
        return False
    extra = result.extra or {}
    # a callback stopped it, or tfrepro's harness did (a timing budget, the step cap)
    if extra.get("callback_stops") or extra.get("stop") not in (None, "exit"):
        return False
    want = reference.steps_run if steps is None else min(reference.steps_run, steps)
    return result.steps_run < want


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
