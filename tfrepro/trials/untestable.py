"""Untestable, not healthy (Contract 3/4): a trial that ran no training
step, or a symptom that could not be measured, says so with its reason and
the way out, instead of passing for "none" (measured, and healthy).

Pure: judges `TrialResult`s, runs nothing. The bisection engine and the
range modes (commits, versions) ask here before they answer `none`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tfrepro.settings import WARMUP_STEPS
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

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
    reason = None
    if not failed:
        reason = no_step_reason(failing, names[1]) or no_step_reason(base, names[0])
    return reason or unmeasured(symptom, base, failing)
