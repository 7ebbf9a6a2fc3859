"""The sanity checks before blaming a feature: the judging (pure, no I/O).

The probes (`tfrepro/inside/probes.py`) record facts inside one trial; this
module turns a `TrialResult` carrying them into a checklist of six items,
each `pass` / `warn` / `fail` / `skip` with its evidence and the fix:

1. environment     versions, devices, build; a GPU expected but absent warns
2. input pipeline  the pipeline alone against the model's step
3. first batches   shapes, dtypes, ranges, NaN/Inf, labels, normalisation
4. initial loss    against chance, ln(C) for cross-entropy over C classes
5. short run       the loss falls and stays finite, weights stay finite
6. parameters      trainable and not (against `expect_params` if given)

Invariants:
- A check without the data it needs says `skip` with the reason (a probe
  that could not apply, a trial that ended early); it never passes by default.
- Checks 4 and 5 are judged only on sound data: when check 3 flags the
  batches, a non-passing 4 or 5 becomes `skip` ("fix the data first") and
  keeps its evidence, so one planted defect is flagged by one check and the
  checklist points at the cause, not at its consequences.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from tfrepro.check.checklist import CheckItem, CheckReport, CheckStatus, fmt_ms, fmt_num, format_report
from tfrepro.check.data import CheckOptions, check_first_batches, item, missing, num_classes
from tfrepro.trials.values import TrialResult

__all__ = ["CheckItem", "CheckOptions", "CheckReport", "CheckStatus", "format_report", "judge", "num_classes"]


# -- 1. environment -----------------------------------------------------------------


def check_environment(result: TrialResult) -> CheckItem:
    env = result.extra.get("check.env")
    if not env:
        return item("environment", CheckStatus.SKIP, missing(result, "env"))
    if not env.get("tensorflow"):
        return item(
            "environment",
            CheckStatus.SKIP,
            "the trial never imported TensorFlow",
            [f"Python {env.get('python')} on {env.get('platform')}"],
        )
    kerases = [f"{label} {env[k]}" for k, label in (("keras", "Keras"), ("tf_keras", "tf_keras")) if env.get(k)]
    versions = f"TensorFlow {env['tensorflow']}, {', '.join(kerases) or 'no Keras'}, Python {env.get('python')}"
    devices = env.get("physical_devices") or {}
    gpus = int(devices.get("GPU", 0))
    dev_text = ", ".join(f"{n} {kind}" for kind, n in sorted(devices.items())) or "none"
    build = env.get("build") or {}
    evidence = [f"physical devices: {dev_text}"]
    if env.get("gpu_names"):
        evidence.append("GPUs: " + ", ".join(env["gpu_names"]))
    logical = env.get("logical_devices")
    if logical and logical != devices:
        evidence.append("logical devices: " + ", ".join(f"{n} {k}" for k, n in sorted(logical.items())))
    if build:
        cuda = "CUDA" if build.get("is_cuda_build") else "ROCm" if build.get("is_rocm_build") else "CPU-only"
        extra = ", ".join(f"{k} {build[k]}" for k in ("cuda_version", "cudnn_version") if build.get(k))
        evidence.append(f"build: {cuda} build" + (f" ({extra})" if extra else ""))
    evidence.append(f"platform: {env.get('platform')}")
    if tf_env := env.get("tf_env"):
        evidence.append("environment: " + ", ".join(f"{k}={v}" for k, v in sorted(tf_env.items())))
    if env.get("gpu_expected") and gpus == 0:
        if build and not build.get("is_cuda_build") and not build.get("is_rocm_build"):
            fix = "this TensorFlow is a CPU-only build: install the GPU one (`pip install 'tensorflow[and-cuda]'`)"
        else:
            fix = (
                "check the driver (`nvidia-smi`), CUDA_VISIBLE_DEVICES, and TensorFlow's start-up log "
                "for 'Could not load dynamic library' / 'Cannot dlopen'"
            )
        summary = f"{versions}; a GPU is expected ({env.get('gpu_expected_why')}) but TensorFlow sees none"
        return item("environment", CheckStatus.WARN, summary, evidence, fix)
    gpu_text = f"{gpus} GPU" if gpus else "no GPU (none expected)"
    return item("environment", CheckStatus.PASS, f"{versions}; {gpu_text}", evidence)


# -- 2. input pipeline on a GPU --------------------------------------------------------
# The input-bound check on a GPU: what NVML saw during the trial.
#
# When `pynvml` (`pip install 'tfrepro[gpu]'`) imports inside the trial, the
# harness samples the utilisation of the trial's GPUs every 0.2 s
# (`extra["nvml"]["gpu_util"]`, percent). A GPU that is idle most of the time
# while the steps take longer than the model's own work waits for its input:
# input-bound, whatever the pipeline timing alone said (on a GPU, the pipeline
# timed on its own competes for the same CPU as the model's dispatch, so the
# utilisation is the more direct evidence). Without samples the check is the
# pipeline timing alone (`check_input_pipeline`).

LOW_UTIL = 50.0  # percent: below this the GPU mostly waits
SLOW_STEP = 1.5  # the step at least this many times the model's own work
INPUT_BOUND_FIX = (
    "fix the data layer first: `ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`, "
    "`ds.cache()` after the expensive deterministic work (before random augmentation), "
    "`ds.prefetch(tf.data.AUTOTUNE)` last; move slow Python (`tf.py_function`) out of `map` or offline"
)


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
    samples = [float(x) for x in ((result.extra.get("nvml") or {}).get("gpu_util") or [])]
    if not samples:
        return item
    steady = samples[len(samples) // 5 :] or samples  # past the first fifth (tracing, compilation, first batches)
    util, n = statistics.median(steady), len(steady)
    compute = (result.extra.get("check.timing") or {}).get("compute_s")
    step = quiet_step_time(result)
    note = (
        f"GPU utilisation (NVML): median {util:.0f}% over {n} samples; input-bound on a GPU when under "
        f"{LOW_UTIL:.0f}% while the step takes at least {SLOW_STEP:g}x the model's own work"
    )
    item = replace(item, evidence=(*item.evidence, note))
    slow = compute is None or step is None or step >= SLOW_STEP * compute
    if util >= LOW_UTIL or not slow:
        return item
    what = f"step {fmt_ms(step)}" + (f" against the model's {fmt_ms(compute)}" if compute and step else "")
    summary = f"input-bound: the GPU is busy {util:.0f}% of the time ({what})"
    return replace(item, status=CheckStatus.WARN, fix=INPUT_BOUND_FIX, summary=summary)


# -- 2. input pipeline ----------------------------------------------------------------


def check_input_pipeline(result: TrialResult, options: CheckOptions = CheckOptions()) -> CheckItem:
    timing = result.extra.get("check.timing")
    if not timing or "timing" in (result.extra.get("check.skips") or {}):
        return item("input_pipeline", CheckStatus.SKIP, missing(result, "timing"))
    if (pipe := timing.get("pipeline_s")) is None:  # probe_tools.time_pipeline: pipeline_s or pipeline_error
        why = f": {timing['pipeline_error']}" if timing.get("pipeline_error") else ""
        return item("input_pipeline", CheckStatus.SKIP, f"the pipeline could not be timed{why}")
    compute = timing.get("compute_s")
    step = quiet_step_time(result)
    evidence = [
        f"input pipeline alone: {fmt_ms(pipe)} per batch ({timing.get('pipeline_batches', '?')} batches; "
        f"{timing.get('pipeline_method', '')})"
    ]
    if compute is not None:
        evidence.append(f"model alone: {fmt_ms(compute)} per step ({timing.get('compute_method', '')})")
    elif timing.get("compute_error"):
        evidence.append(f"model alone: not measured ({timing['compute_error']})")
    if step is not None:
        evidence.append(
            f"trial: {fmt_ms(step)} per step (first quartile of the steps after warm-up; "
            f"median {fmt_ms(result.median_step_time())})"
        )
    evidence.append(
        f"input-bound when the pipeline is slower than the model and takes at least "
        f"{options.input_bound_step_share:.0%} of the trial's step (or {options.input_bound_alone:g}x the model's)"
    )
    reference = compute if compute is not None else step
    if reference is None:
        return item(
            "input_pipeline", CheckStatus.SKIP, "no step time to compare with (no model, no training step)", evidence
        )
    # The data starves the model when it takes longer than the model's own work AND a real share
    # of the step (tiny models on a busy CPU make the first comparison alone noisy). A pipeline many
    # times slower than the model bounds the step by itself: the trial's step, stretched by a busy
    # machine (another CPU-bound process), does not make it a small share.
    bound = compute is None or pipe > compute
    if bound and step is not None and pipe < options.input_bound_step_share * step:
        bound = compute is not None and pipe >= options.input_bound_alone * compute
    if bound:
        summary = (
            f"input-bound: the pipeline alone needs {fmt_ms(pipe)} per batch, "
            f"the model {fmt_ms(reference)} per step" + (f" (trial step {fmt_ms(step)})" if step else "")
        )
        return item("input_pipeline", CheckStatus.WARN, summary, evidence, INPUT_BOUND_FIX)
    ratio = pipe / reference if reference else 0.0
    summary = f"not input-bound: pipeline {fmt_ms(pipe)} per batch, model {fmt_ms(reference)} per step ({ratio:.0%})"
    return item("input_pipeline", CheckStatus.PASS, summary, evidence)


# -- 4. initial loss -----------------------------------------------------------------


def _off_chance(first: float, chance: float, hi: float, status: CheckStatus) -> tuple[str, str]:
    """What an initial loss outside the pass band says, and its fix."""
    if first > hi:
        summary = (
            f"initial loss {fmt_num(first)} is far above chance {chance:.3f}: confidently wrong at initialisation"
            if status is CheckStatus.FAIL
            else f"initial loss {fmt_num(first)} is above chance {chance:.3f} (pass up to {hi:.3f}): "
            f"overconfident at initialisation"
        )
        return summary, (
            "normalise the inputs, check the initialisation scale (a smaller last layer, e.g. "
            "kernel_initializer='zeros'), and that softmax is applied exactly once "
            "(logits + from_logits=True, or softmax + from_logits=False)"
        )
    far = "far " if status is CheckStatus.FAIL else ""
    return f"initial loss {fmt_num(first)} is {far}below chance {chance:.3f}", (
        "the labels may leak into the inputs, some samples may contribute nothing (rows of zeros "
        "from `tf.one_hot`), or the loss is not averaged per sample"
    )


def check_initial_loss(result: TrialResult, options: CheckOptions = CheckOptions()) -> CheckItem:
    loss = result.extra.get("check.loss")
    model = result.extra.get("check.model")
    c, why = num_classes(loss, model)
    if c is None:
        return item("initial_loss", CheckStatus.SKIP, f"chance level unknown: {why}")
    if not result.losses:
        reason = f"the run crashed before step 1: {result.error}" if result.crashed else "no training step finished"
        return item("initial_loss", CheckStatus.SKIP, reason)
    first = result.losses[0]
    chance = math.log(c)
    # The pass and fail bands around chance. Above it the slack is absolute as well as relative:
    # with logits of standard deviation s at initialisation the loss exceeds ln(C) by roughly
    # s²/2 whatever C, so a relative band alone would punish few classes.
    lo, fail_lo = chance * (1 - options.chance_tolerance), chance / 2
    hi = chance + max(options.chance_tolerance * chance, options.chance_slack_nats)
    fail_hi = chance + max(chance, options.chance_fail_nats)
    expect = f"chance ln({c}) = {chance:.3f}"
    bands = (
        f"pass {lo:.3f}..{hi:.3f} (-{options.chance_tolerance:.0%}, +max({options.chance_tolerance:.0%}, "
        f"{options.chance_slack_nats:g} nats)); fail below {fail_lo:.3f} or above {fail_hi:.3f}"
    )
    evidence = [
        f"step 1 loss: {fmt_num(first)}",
        f"expected at initialisation: {expect}; {bands}",
        f"loss: {loss.get('name')} (from_logits={loss.get('from_logits')}, seen at {loss.get('source')})",
    ]
    if act := (model or {}).get("last_activation"):
        evidence.append(f"last layer activation: {act}")
    status, fix = CheckStatus.PASS, None
    summary = f"initial loss {fmt_num(first)} ≈ {expect} (pass {lo:.3f}..{hi:.3f})"
    if not math.isfinite(first):
        status, summary = CheckStatus.FAIL, f"the first loss is {first}"
        fix = "look at the inputs (check 3) and for log(0) / division in the loss"
    elif not lo <= first <= hi:
        status = CheckStatus.FAIL if (first < fail_lo or first > fail_hi) else CheckStatus.WARN
        summary, fix = _off_chance(first, chance, hi, status)
    elif act is not None and loss.get("from_logits") is not None:  # the last layer against from_logits
        squash = "sigmoid" if loss.get("kind") == "binary" else "softmax"
        if loss["from_logits"] and act == squash:
            status = CheckStatus.WARN
            summary = f"the last layer applies {squash} and the loss from_logits=True applies it again"
            fix = f"drop the {squash} from the last layer, or pass from_logits=False"
        elif not loss["from_logits"] and act == "linear":
            status = CheckStatus.WARN
            summary = "the last layer outputs logits (linear) but the loss expects probabilities (from_logits=False)"
            fix = "pass from_logits=True to the loss"
    return item("initial_loss", status, summary, evidence, fix)


# -- 5. short run --------------------------------------------------------------------


def check_short_run(result: TrialResult, options: CheckOptions = CheckOptions()) -> CheckItem:
    """Whether the loss falls, or why the run did not run through: a
    timeout, a non-finite loss or weights, a crash, no training step at all."""
    n, step, status = len(result.losses), result.first_nonfinite_step, CheckStatus.FAIL
    evidence = [f"{n} step(s), mode {result.mode}"]
    shown = ["losses: " + ", ".join(fmt_num(x) for x in result.losses[:5]) + (" ..." if n > 5 else "")]
    if result.timed_out:
        summary = f"the run timed out after {n} step(s)"
        fix = "raise [trial] timeout_s, or look for a hang in the input pipeline"
    elif step is not None:
        summary = f"the loss became {result.losses[step - 1]} at step {step}"
        evidence += shown
        fix = (
            "lower the learning rate, look at the inputs (check 3), clip gradients; "
            "`tf.debugging.enable_check_numerics()` names the first op"
        )
    elif result.weights_finite is False:
        names = ", ".join(result.nonfinite_weights[:4]) + (" ..." if len(result.nonfinite_weights) > 4 else "")
        summary = f"weights hold NaN/Inf after {n} step(s): {names}"
        evidence += shown
        fix = "a ReLU turns NaN into 0 and hides it from the loss: look at the inputs (check 3) and the learning rate"
    elif result.crashed:
        summary = f"the run crashed after {n} step(s): {result.error}"
        fix = "fix the error above (the trial's log is in .tfrepro/)"
    elif n == 0 and result.mode == "none":
        status = CheckStatus.SKIP
        summary = (
            "no training step was seen: Model.fit never ran, no optimizer applied gradients, and the script "
            "printed no `step=<int> loss=<float>` line"
        )
        fix = (
            "a custom loop is measured at its optimizer's apply_gradients/apply; one that updates the weights "
            "otherwise can print `step=N loss=X` per step"
        )
    elif n < 4:
        return item(
            "short_run", CheckStatus.SKIP, f"only {n} training step(s) ran; 4 are needed to see a trend", evidence
        )
    else:
        w = max(2, n // 5)
        head = sum(result.losses[:w]) / w
        tail = sum(result.losses[-w:]) / w
        evidence.append(f"mean of the first {w} steps: {fmt_num(head)}; of the last {w}: {fmt_num(tail)}")
        trend = f"({fmt_num(head)} → {fmt_num(tail)} over {n} steps)"
        if tail < head - options.fall_fraction * abs(head):
            return item("short_run", CheckStatus.PASS, f"the loss falls {trend} and stays finite", evidence)
        summary = f"the loss does not fall {trend}"
        fix = (
            "check the learning rate, that the optimizer updates model.trainable_variables, "
            "that custom loops pass training=True, and the labels (check 3)"
        )
    return item("short_run", status, summary, evidence, fix)


# -- 6. parameters ----------------------------------------------------------------------


def check_parameters(result: TrialResult, options: CheckOptions = CheckOptions()) -> CheckItem:
    model = result.extra.get("check.model")
    if not model:
        return item("parameters", CheckStatus.SKIP, missing(result, "model"))
    if model.get("trainable") is None:
        return item("parameters", CheckStatus.SKIP, f"the parameters of model {model.get('name')} could not be counted")
    tr, nt = int(model["trainable"]), int(model.get("non_trainable") or 0)
    total = tr + nt
    summary = f"{total:,} parameters: {tr:,} trainable, {nt:,} non-trainable (model {model.get('name')!r})"
    evidence = [f"model {model.get('name')!r} ({model.get('class')}), output width {model.get('output_width')}"]
    status, fix, expected = CheckStatus.PASS, None, options.expect_params
    if expected is not None:
        evidence.append(f"expected: {expected:,} in total")
    if expected is not None and total != expected:
        status, summary = CheckStatus.FAIL, f"{summary}; expected {expected:,}"
        fix = (
            "compare `model.summary()` with the architecture you meant (layer widths, a frozen "
            "or missing block, a model built on the wrong input shape)"
        )
    elif total == 0:
        status, summary = CheckStatus.WARN, f"model {model.get('name')!r} has no parameters (never built?)"
        fix = "build the model (keras.Input or a first call) before training"
    elif tr == 0:
        status, summary = CheckStatus.WARN, f"{summary}: nothing can train"
        fix = "set `trainable = True` on the layers meant to learn"
    return item("parameters", status, summary, evidence, fix)


# -- the checklist ----------------------------------------------------------------------


def judge(result: TrialResult, options: CheckOptions = CheckOptions(), *, project: str = "") -> CheckReport:
    """The six checks for one probed trial, with the data-first rule applied."""
    items = [
        check_environment(result),
        with_gpu_utilisation(check_input_pipeline(result, options), result),
        check_first_batches(result, options),
        check_initial_loss(result, options),
        check_short_run(result, options),
        check_parameters(result, options),
    ]
    flagged = (CheckStatus.FAIL, CheckStatus.WARN)
    if (batches := items[2]).status in flagged:  # check 3: the data-first rule (see the module docstring)
        for k, i in enumerate(items):
            if i.key in ("initial_loss", "short_run") and i.status in flagged:
                items[k] = replace(
                    i,
                    status=CheckStatus.SKIP,
                    summary=f"not judged: the first batches are flagged (check {batches.number}); observed: {i.summary}",
                    fix=f"fix check {batches.number} first, then run `tfrepro check` again",
                )
    trial = {k: getattr(result, k) for k in ("mode", "steps_run", "crashed", "error", "timed_out", "wall_s", "log_dir")}
    trial["first_loss"] = result.losses[0] if result.losses and math.isfinite(result.losses[0]) else None
    trial["probe_errors"] = [*(result.extra.get("check.errors") or []), *(result.extra.get("harness_errors") or [])]
    return CheckReport(tuple(items), project=project, enabled=tuple(result.enabled), trial=trial)
