"""The sentences and lines ISSUE.md is made of (pure: report document in,
text out): what happened against what was expected, the measured series,
the environment fields."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from tfrepro.report.answer import Env, Report, timed
from tfrepro.trials.values import TrialResult

SYMPTOM_WORDS = {
    "nan": "NaN/Inf loss",
    "crash": "crash",
    "timeout": "hang (timeout)",
    "memory": "memory growth / out of memory",
    "mismatch": "loss mismatch",
    "slowdown": "slowdown",
}


def fmt(x: Any, digits: int = 4) -> str:
    """How ISSUE.md writes a number."""
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else f"{x:.{digits}g}"
    return str(x)


def names(xs: list[str] | None) -> str:
    return " + ".join(f"`{x}`" for x in xs) if xs else "(none)"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1000 * seconds:.2f} ms"


# --------------------------------------------------------------------------- environment fields


def gpu_line(env: Env) -> str:
    gpus, driver = env.gpus or [], env.nvidia_driver
    if not gpus:
        kinds = ", ".join(sorted({d.get("type", "?") for d in env.devices or []})) or "unknown"
        seen = "; ".join(f"{g.get('name')}, {g.get('memory')}" for g in env.smi_gpus or [])
        return f"no GPU visible to TensorFlow (devices: {kinds})" + (
            f"; nvidia-smi lists {seen}, driver {driver}" if seen else ""
        )
    parts = [
        (g.get("name") or "GPU")
        + (f", {g['memory']}" if g.get("memory") else "")
        + (f" (compute capability {g['compute_capability']})" if g.get("compute_capability") else "")
        for g in gpus
    ]
    driver = driver or next((g["driver"] for g in gpus if g.get("driver")), None)
    return "; ".join(parts) + (f"; NVIDIA driver {driver}" if driver else "")


def keras_line(env: Env) -> str:
    """Keras's version, and tf_keras's beside it when installed."""
    tfk = env.tf_keras_dist
    return (env.keras or "unknown") + (f"; tf_keras {tfk.get('version')}" if tfk else "")


def cuda_line(env: Env) -> str:
    """Build info, then what this machine loads: CUDA wheels, library path."""
    b = env.build_info or {}
    if not b or "error" in b:
        s = "unknown (tf.sysconfig.get_build_info() unavailable)"
    elif not b.get("is_cuda_build") and not b.get("cuda_version"):
        s = "n/a (TensorFlow built without CUDA)"
    else:
        s = f"CUDA {b.get('cuda_version', '?')} / cuDNN {b.get('cudnn_version', '?')} (build info)"
        if not env.gpus:
            s += "; no GPU in use on this machine"
    if env.cuda_wheels:
        s += "; wheels: " + ", ".join(f"{n} {v}" for n, v in env.cuda_wheels.items())
    if env.ld_library_path:
        s += f"; LD_LIBRARY_PATH={env.ld_library_path}"
    return s


# --------------------------------------------------------------------------- behaviour


def behaviour(r: Report) -> tuple[str, str]:
    """(current, expected) sentences for the run's symptom."""
    if r.first_bad_commit:
        subject = (r.commit or {}).get("subject")
        who = f"Since commit `{r.first_bad_commit[:12]}`" + (f" ({subject})" if subject else "")
    else:
        who = f"With {names(r.culprits)} enabled" if r.culprits else "In the failing configuration"
    return _BEHAVIOUR.get(r.symptom or "", _other)(r, who)


def _alone(r: Report) -> str:
    culprits = r.culprits or []
    if len(culprits) > 1:
        ablation = r.evidence.ablation or {}
        text = " Removing any one of them makes the symptom disappear"
        if all(ablation.get(c) == "ok" for c in culprits):
            text += "; each alone on the baseline trains normally: only together do they fail"
        return text + "."
    return " Without it, the same script trains normally." if culprits else ""


def _baseline_words(r: Report) -> str:
    loss = r.base.losses
    if not loss:
        return "training completes"
    return f"the loss goes from {fmt(loss[0])} to {fmt(loss[-1])} over {len(loss)} steps"


def _nan(r: Report, who: str) -> tuple[str, str]:
    cand = r.candidate
    step = cand.first_nonfinite_step
    if step is not None:
        cur = f"{who}, the training loss becomes NaN/Inf at step {step}."
    else:
        cur = f"{who}, the weights hold NaN/Inf at the end of training (the loss itself stays finite)."
    if cand.nonfinite_weights:
        cur += " Non-finite variables: " + ", ".join(f"`{w}`" for w in cand.nonfinite_weights[:8]) + "."
    return cur + _alone(r), f"The loss stays finite, as in the baseline configuration ({_baseline_words(r)})."


def _crash(r: Report, who: str) -> tuple[str, str]:
    return (
        f"{who}, training raises: `{r.candidate.error or 'see log'}`.{_alone(r)}",
        f"Training runs to the end, as in the baseline configuration ({_baseline_words(r)}).",
    )


def _timeout(r: Report, who: str) -> tuple[str, str]:
    limit = fmt((r.settings or {}).get("timeout_s"))
    return (
        f"{who}, training does not finish within {limit} s.{_alone(r)}",
        "Training finishes in about the baseline's time.",
    )


def _slowdown(r: Report, who: str) -> tuple[str, str]:
    timing = timed(r.evidence)
    b, c = r.base.median_step_time(), r.candidate.median_step_time()
    if timing.baseline and timing.candidate:
        # one number per claim: the step times and the ratio from the same timed samples
        b, c = statistics.median(timing.baseline), statistics.median(timing.candidate)
    ratio = timing.ratio or (c / b if b and c else None)
    # what supports the claim, quoted only when it does: the pairs, and the rank test's p-value when significant
    n, p = len(timing.pairs or timing.candidate or []), timing.p_value
    if timing.fast:
        support = f", {n} clear-cut interleaved pair{'s' if n != 1 else ''}"
    elif p is not None and p <= 0.05:
        support = f", {n} interleaved pairs, one-sided signed-rank test p={fmt(p, 3)}"
    else:
        support = f", {n} interleaved pair{'s' if n != 1 else ''}" if n else ""
    cur = (
        f"{who}, the median steady-state step time is {_ms(c)} against {_ms(b)} without"
        f" ({fmt(ratio, 3)}x{support}; warm-up steps excluded).{_alone(r)}"
    )
    return cur, "The step time stays close to the baseline's."


def mismatch_pair(r: Report) -> tuple[TrialResult, TrialResult]:
    """(candidate, reference) trials a mismatch compares: both from the
    report's re-run when it ran the reference, else the bisect's."""
    if r.reference:
        return r.rerun.trial or r.candidate, r.reference
    return r.candidate, r.base


def _mismatch(r: Report, who: str) -> tuple[str, str]:
    cand, ref = mismatch_pair(r)
    r_loss, c_loss = ref.losses, cand.losses
    tol = fmt(r.symptom_settings.mismatch)
    cur = f"{who}, the per-step loss no longer matches the reference configuration (tolerance {tol} relative)"
    if r_loss and c_loss:
        cur += f": last loss {fmt(c_loss[-1])} vs {fmt(r_loss[-1])} after {min(len(r_loss), len(c_loss))} steps"
    refcfg = r.reference_config or []
    cur += (
        ". The reference is the same script with "
        + (
            f"only {names(refcfg)} (features that change the loss by design) on"
            if refcfg
            else "every engineering feature off"
        )
        + f": `{r.repro.reference}`."
    )
    alone = (
        " Without the culprit, the losses match the reference step for step."
        if len(r.culprits or []) == 1
        else _alone(r)
    )
    return cur + alone, (
        "The per-step loss matches the reference (same math, only engineering "
        "features differ), as it does without the culprit."
    )


def _mb(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) else f"{x / 1e6:.1f} MB"


def _memory(r: Report, who: str) -> tuple[str, str]:
    cand, base = r.candidate, r.base
    if cand.crashed:
        cur = f"{who}, training is killed for memory: `{cand.error or 'exit ' + str(cand.exit_code)}`."
    else:
        cur = (
            f"{who}, the process's peak resident memory is {_mb(cand.peak_rss_bytes)} against "
            f"{_mb(base.peak_rss_bytes)} without, and it grows by {_mb(cand.growth_per_step)} per step "
            f"(baseline {_mb(base.growth_per_step)} per step; robust slope over the steady steps)."
        )
        if cand.device_peak_bytes:
            cur += f" Device peak: {_mb(cand.device_peak_bytes)} against {_mb(base.device_peak_bytes)}."
    return cur + _alone(r), "Memory stays flat after the first steps, as in the baseline configuration."


def _other(r: Report, who: str) -> tuple[str, str]:
    return f"{who}, the run shows {r.symptom}.", "The run behaves as the baseline."


_BEHAVIOUR: dict[str, Callable[[Report, str], tuple[str, str]]] = {
    "nan": _nan,
    "crash": _crash,
    "timeout": _timeout,
    "slowdown": _slowdown,
    "mismatch": _mismatch,
    "memory": _memory,
}


# --------------------------------------------------------------------------- logs


def _series(xs: Sequence[float], scale: float = 1.0, n: int = 12) -> str:
    shown = ", ".join(fmt(float(x) * scale) for x in xs[:n])  # a non-finite loss reads back as NaN
    return shown + (" ..." if len(xs) > n else "")


def series_log(r: Report) -> list[str]:
    """The measured series a maintainer compares, as text."""
    cand, base = r.culprit or TrialResult(), r.base
    if r.symptom in ("slowdown", "memory"):
        slow = r.symptom == "slowdown"
        what, scale = ("step time, ms", 1000) if slow else ("RSS after each step, MB", 1e-6)
        lines = [  # the two series aligned
            f"{what} {role + ':':<24} {_series(t.step_times if slow else t.rss_per_step, scale)}"
            for role, t in (("(culprit configuration)", cand), ("(baseline)", base))
        ]
        timing = timed(r.rerun)
        if slow and timing.candidate:
            lines.append(
                f"re-run medians, ms: repro.py {_series(timing.candidate, 1000)}; "
                f"{r.repro.reference} {_series(timing.baseline or [], 1000)}"
            )
        return lines
    if r.symptom == "mismatch":
        cand, ref = mismatch_pair(r)
        lines = [
            f"per-step loss, repro.py:     {_series(cand.losses)}",
            f"per-step loss, {r.repro.reference}: {_series(ref.losses)}",
        ]
        if "custom_loop" in (r.culprits or []):
            tol = r.symptom_settings.mismatch
            lines += ["", *first_diverging_rows(cand.losses, ref.losses, tol)]
        return lines
    if cand.losses:
        return [f"per-step loss (culprit configuration): {_series(cand.losses)}"]
    return []


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return abs(a - b) / max(abs(b), 1e-12)


def first_diverging_rows(loop: Sequence[float | None], fit: Sequence[float | None], tol: float) -> list[str]:
    """A custom loop against fit, step by step (a `custom_loop` culprit: repro.py keeps the loop,
    reference.py is fit built from its parts), as a plain-text table: the first step, then the
    first six steps where the loop's loss is off fit's by more than `tol`."""
    rels = [_rel(a, b) for a, b in zip(loop, fit)]
    if not rels:
        return []
    off = [i for i, rel in enumerate(rels) if rel is None or rel > tol]
    if not off:
        return [f"custom loop (repro.py) and fit (reference.py) agree within {fmt(tol)} over {len(rels)} steps"]
    lines = [
        f"first diverging steps, custom loop (repro.py) against fit (reference.py), tolerance {fmt(tol)}:",
        f"{'step':>6}  {'loop':>12}  {'fit':>12}  {'relative':>9}",
    ]
    for i in sorted({0, *off[:6]}):
        cells = ["NaN" if v is None or not math.isfinite(v) else fmt(v) for v in (loop[i], fit[i])]
        lines.append(f"{i + 1:>6}  {cells[0]:>12}  {cells[1]:>12}  {'-' if rels[i] is None else fmt(rels[i]):>9}")
    return lines


def log_output(r: Report) -> str:
    """The error output (localisation excerpt, traceback tail, the re-run's
    error) and the measured series, as plain text."""
    log = []
    if r.localization and r.localization.found:
        log.append(r.localization.excerpt)
    cand = r.culprit or TrialResult()
    if cand.error_detail:  # a crash's traceback, last lines
        log.append("\n".join(str(cand.error_detail).strip().splitlines()[-40:]))
    elif cand.error:
        log.append(cand.error)
    rerun_error = (r.rerun.trial or TrialResult()).error
    if rerun_error and rerun_error not in log:
        log.append(rerun_error)
    log.extend(series_log(r))
    return "\n".join(log) if log else "(no error output: see the per-step loss in loss.png)"
