"""The input-bound check on a GPU: what NVML saw during the trial (pure).

When `pynvml` (`pip install 'tfrepro[gpu]'`) imports inside the trial, the
harness samples the utilisation of the trial's GPUs every 0.2 s
(`extra["nvml"]["gpu_util"]`, percent). A GPU that is idle most of the time
while the steps take longer than the model's own work waits for its input:
input-bound, whatever the pipeline timing alone said (on a GPU, the pipeline
timed on its own competes for the same CPU as the model's dispatch, so the
utilisation is the more direct evidence). Without samples the check is the
pipeline timing alone (`judge.check_input_pipeline`).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from tfrepro.check.checklist import CheckItem, CheckStatus, fmt_ms
from tfrepro.trials.values import TrialResult

LOW_UTIL = 50.0  # percent: below this the GPU mostly waits
SLOW_STEP = 1.5  # the step at least this many times the model's own work
INPUT_BOUND_FIX = (
    "fix the data layer first: `ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`, "
    "`ds.cache()` after the expensive deterministic work (before random augmentation), "
    "`ds.prefetch(tf.data.AUTOTUNE)` last; move slow Python (`tf.py_function`) out of `map` or offline"
)


def steady_utilisation(result: TrialResult) -> tuple[float, int] | None:
    """(median GPU utilisation %, samples) past the first fifth of the trial
    (tracing, compilation, the first batches); None without NVML samples."""
    samples = [float(x) for x in ((result.extra.get("nvml") or {}).get("gpu_util") or [])]
    if not samples:
        return None
    steady = samples[len(samples) // 5 :] or samples
    return statistics.median(steady), len(steady)


def quiet_step_time(result: TrialResult) -> float | None:
    """The trial's step time as the data allows it: the first quartile of
    the steps after warm-up. Load from other processes only lengthens steps,
    and an input-bound step waits for its batch every time, so the low
    quartile keeps the signal and drops the interference."""
    steady = sorted(result.steady_step_times())
    return steady[len(steady) // 4] if steady else None


def with_gpu_utilisation(item: CheckItem, result: TrialResult) -> CheckItem:
    """The input-pipeline item with the GPU's utilisation as evidence, and
    `warn` (input-bound) when the GPU idles while the steps are slow."""
    if (got := steady_utilisation(result)) is None:
        return item
    util, n = got
    timing = result.extra.get("check.timing") or {}
    compute = timing.get("compute_s")
    step = quiet_step_time(result)
    item = replace(
        item,
        evidence=(
            *item.evidence,
            f"GPU utilisation (NVML): median {util:.0f}% over {n} samples; input-bound on a GPU when under "
            f"{LOW_UTIL:.0f}% while the step takes at least {SLOW_STEP:g}x the model's own work",
        ),
    )
    slow = compute is None or step is None or step >= SLOW_STEP * compute
    if util >= LOW_UTIL or not slow:
        return item
    what = f"step {fmt_ms(step)}" + (f" against the model's {fmt_ms(compute)}" if compute and step else "")
    summary = f"input-bound: the GPU is busy {util:.0f}% of the time ({what})"
    return replace(item, status=CheckStatus.WARN, fix=INPUT_BOUND_FIX, summary=summary)
