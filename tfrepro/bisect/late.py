"""The late step: the failing configuration's first trial runs until its symptom.

A fixed 50 steps misses a NaN that first shows at step 600 (an export sorted
by one column, no shuffle, the bad rows in the last batches of the epoch).
Without `--steps`, the failing configuration's first trial runs with no step
cap, for the script's own length and at most `[trial] budget_s` seconds of
training (`TrialSettings.until_symptom`). When it shows a NaN or a crash past
`steps`, every later trial runs to a little past that step
(`settings.late_steps`), and the trials already run at the shorter length
(the baseline, the mismatch reference) are judged again at the new one.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from tfrepro.trials.trial import Purpose, Trial, TrialOptions
from tfrepro.trials.values import TrialResult


def symptom_step(result: TrialResult) -> int | None:
    """The step at which `result` first showed a NaN or a crash, or None.
    A NaN seen only in the weights at the end, and a crash, count at the last
    step the trial ran (a crash before any step: step 1)."""
    if result.first_nonfinite_step is not None:
        return result.first_nonfinite_step
    if result.crashed or result.weights_finite is False:
        return max(1, result.steps_run)
    return None


def later_calls_steps(result: TrialResult, steps: int) -> int | None:
    """The steps a trial needs to reach every training call that the run until
    its symptom ran and a `steps`-long trial never starts (fit#2 of a script
    whose fit#1 alone is longer than `steps`: a slowdown there is in no capped
    trial): up to the last such call's start plus `steps` (at most what the run
    ran). None when every call starts within `steps`."""
    from tfrepro.trials.calls import calls_of

    starts = [c.start for c in calls_of(result) if c.start >= steps and c.end > c.start]
    if not starts:
        return None
    return max(steps, min(result.steps_run, max(starts) + steps))


# The repeat index of the nan-state trial (apart from every search and replay index).
NAN_STATE_REPEAT = 900
NAN_STATE_DIR = "nan_state"


def save_nan_state(run, config) -> dict | None:
    """For a NaN: rerun `config` (seeded, deterministic) to its first NaN step,
    saving the state before that step and its batch (`harness_keras.StateSaver`),
    copied to `<run_dir>/nan_state/`. Returns result.json's `nan_state`, or
    None when the NaN showed in no loss (only in the weights at the end)."""
    first = run.memo.get((config, 0))
    step = first.first_nonfinite_step if first is not None else None
    if not step:
        return None
    settings = replace(run.settings, repeat=NAN_STATE_REPEAT, steps=step, save_state_step=step)
    request = Trial(
        tuple(sorted(config)), settings, TrialOptions(label=Purpose.NAN_STATE, use_cache=run.opts.use_cache)
    )
    run.events.phase(f"saving the state before the NaN step {step}")
    got = run.executor.run_batch(
        run.project, [request], on_result=lambda i, res: run._record(config, NAN_STATE_REPEAT, Purpose.NAN_STATE, res)
    )[0]
    src = Path(got.log_dir or "") / NAN_STATE_DIR
    doc = {"step": step, "dir": None, "config": sorted(config), "deterministic": run.settings.deterministic}
    if got.log_dir and (src / "state.npz").is_file() and (src / "batch.npz").is_file():
        shutil.copytree(src, run.run_dir / NAN_STATE_DIR, dirs_exist_ok=True)
        doc["dir"] = NAN_STATE_DIR
    else:
        doc["error"] = "the nan-state trial saved no state (a custom loop, or no Keras fit)"
    return doc


def within_steps(result: TrialResult, steps: int) -> TrialResult:
    """The view at `steps` of a trial that ran past them (the run until its
    symptom, the script's whole length): its RSS series cut at `steps`, so a
    longer run is not judged against a shorter baseline's peak and growth;
    and a timeout after `steps` is not one at `steps` (the trials compared
    with it stop there: on a loaded machine the whole-length run can reach
    the trial's time limit, and its timeout, seen in no capped trial, made a
    healthy script `flaky`). A NaN or a crash past `steps` moves every trial
    past it instead (`symptom_step`)."""
    if result.steps_run <= steps:
        return result
    if result.timed_out:
        result = replace(result, timed_out=False, extra={**result.extra, "timed_out_at_step": result.steps_run})
    if not result.rss_per_step:
        return result
    stride = max(1, int((result.extra.get("memory") or {}).get("stride") or 1))
    series = result.rss_per_step[: max(1, -(-steps // stride))]
    peak = min(max(series), result.peak_rss_bytes or max(series))
    return replace(result, rss_per_step=series, peak_rss_bytes=peak, growth_per_step=None, steps_run=steps)
