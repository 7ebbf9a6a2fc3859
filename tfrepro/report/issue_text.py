"""The sentences and lines ISSUE.md is made of (pure: report document in,
text out): what happened against what was expected, the measured series,
the environment fields."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from tfrepro.report.textfmt import fmt

SYMPTOM_WORDS = {
    "nan": "NaN/Inf loss",
    "crash": "crash",
    "timeout": "hang (timeout)",
    "memory": "memory growth / out of memory",
    "mismatch": "loss mismatch",
    "slowdown": "slowdown",
}


def names(xs: list[str]) -> str:
    return " + ".join(f"`{x}`" for x in xs) if xs else "(none)"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1000 * seconds:.2f} ms"


# --------------------------------------------------------------------------- environment fields


def gpu_line(env: dict[str, Any]) -> str:
    gpus = env.get("gpus") or []
    driver = env.get("nvidia_driver")
    if not gpus:
        devices = env.get("devices") or []
        kinds = ", ".join(sorted({d.get("type", "?") for d in devices})) or "unknown"
        seen = "; ".join(f"{g.get('name')}, {g.get('memory')}" for g in env.get("smi_gpus") or [])
        return f"no GPU visible to TensorFlow (devices: {kinds})" + (
            f"; nvidia-smi lists {seen}, driver {driver}" if seen else ""
        )
    parts = []
    for g in gpus:
        s = g.get("name") or "GPU"
        if g.get("memory"):
            s += f", {g['memory']}"
        if g.get("compute_capability"):
            s += f" (compute capability {g['compute_capability']})"
        parts.append(s)
    driver = driver or next((g["driver"] for g in gpus if g.get("driver")), None)
    return "; ".join(parts) + (f"; NVIDIA driver {driver}" if driver else "")


def cuda_line(env: dict[str, Any]) -> str:
    """Build info, then what this machine loads: CUDA wheels, library path."""
    b = env.get("build_info") or {}
    if not b or "error" in b:
        s = "unknown (tf.sysconfig.get_build_info() unavailable)"
    elif not b.get("is_cuda_build") and not b.get("cuda_version"):
        s = "n/a (TensorFlow built without CUDA)"
    else:
        s = f"CUDA {b.get('cuda_version', '?')} / cuDNN {b.get('cudnn_version', '?')} (build info)"
        if not env.get("gpus"):
            s += "; no GPU in use on this machine"
    wheels = env.get("cuda_wheels") or {}
    if wheels:
        s += "; wheels: " + ", ".join(f"{n} {v}" for n, v in wheels.items())
    if env.get("ld_library_path"):
        s += f"; LD_LIBRARY_PATH={env['ld_library_path']}"
    return s


# --------------------------------------------------------------------------- behaviour


def behaviour(doc: dict[str, Any]) -> tuple[str, str]:
    """(current, expected) sentences for the run's symptom."""
    sym = doc.get("symptom") or ""
    current, expected = _BEHAVIOUR.get(sym, _other)(doc, _subject(doc))
    return current, expected


def _subject(doc: dict[str, Any]) -> str:
    if doc.get("first_bad_commit"):
        subject = (doc.get("commit") or {}).get("subject")
        return f"Since commit `{doc['first_bad_commit'][:12]}`" + (f" ({subject})" if subject else "")
    culprits = doc.get("culprits") or []
    return f"With {names(culprits)} enabled" if culprits else "In the failing configuration"


def _alone(doc: dict[str, Any]) -> str:
    culprits = doc.get("culprits") or []
    if len(culprits) > 1:
        ablation = (doc.get("evidence") or {}).get("ablation") or {}
        text = " Removing any one of them makes the symptom disappear"
        if all(ablation.get(c) == "ok" for c in culprits):
            text += "; each alone on the baseline trains normally: only together do they fail"
        return text + "."
    return " Without it, the same script trains normally." if culprits else ""


def _baseline_words(doc: dict[str, Any]) -> str:
    loss = (doc.get("baseline") or {}).get("losses") or []
    if not loss:
        return "training completes"
    return f"the loss goes from {fmt(loss[0])} to {fmt(loss[-1])} over {len(loss)} steps"


def _candidate(doc: dict[str, Any]) -> dict[str, Any]:
    return doc.get("culprit_trial") or doc.get("failing") or {}


def _nan(doc: dict[str, Any], who: str) -> tuple[str, str]:
    cand = _candidate(doc)
    step = cand.get("first_nonfinite_step")
    if step is not None:
        cur = f"{who}, the training loss becomes NaN/Inf at step {step}."
    else:
        cur = f"{who}, the weights hold NaN/Inf at the end of training (the loss itself stays finite)."
    bad_w = cand.get("nonfinite_weights") or []
    if bad_w:
        cur += " Non-finite variables: " + ", ".join(f"`{w}`" for w in bad_w[:8]) + "."
    return cur + _alone(doc), f"The loss stays finite, as in the baseline configuration ({_baseline_words(doc)})."


def _crash(doc: dict[str, Any], who: str) -> tuple[str, str]:
    error = _candidate(doc).get("error") or "see log"
    return (
        f"{who}, training raises: `{error}`.{_alone(doc)}",
        f"Training runs to the end, as in the baseline configuration ({_baseline_words(doc)}).",
    )


def _timeout(doc: dict[str, Any], who: str) -> tuple[str, str]:
    limit = fmt((doc.get("settings") or {}).get("timeout_s"))
    return (
        f"{who}, training does not finish within {limit} s.{_alone(doc)}",
        "Training finishes in about the baseline's time.",
    )


def _slowdown(doc: dict[str, Any], who: str) -> tuple[str, str]:
    timing = (doc.get("evidence") or {}).get("timing") or {}
    b, c = (doc.get("baseline") or {}).get("median_step_time"), _candidate(doc).get("median_step_time")
    if timing.get("baseline") and timing.get("candidate"):
        # one number per claim: the step times and the ratio from the same timed samples
        b, c = statistics.median(timing["baseline"]), statistics.median(timing["candidate"])
    ratio = timing.get("ratio") or (c / b if b and c else None)
    cur = (
        f"{who}, the median steady-state step time is {_ms(c)} against {_ms(b)} without"
        f" ({fmt(ratio, 3)}x{timing_support(timing)}; warm-up steps excluded).{_alone(doc)}"
    )
    return cur, "The step time stays close to the baseline's."


def timing_support(timing: dict[str, Any]) -> str:
    """What supports a slowdown claim, quoted only when it does: the pairs,
    and the rank test's p-value when it is significant."""
    n = len(timing.get("pairs") or timing.get("candidate") or [])
    if timing.get("fast"):
        return f", {n} clear-cut interleaved pair{'s' if n != 1 else ''}"
    p = timing.get("p_value")
    if p is not None and p <= 0.05:
        return f", {n} interleaved pairs, one-sided signed-rank test p={fmt(p, 3)}"
    return f", {n} interleaved pair{'s' if n != 1 else ''}" if n else ""


def mismatch_pair(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(candidate, reference) trials a mismatch compares: both from the
    report's re-run when it ran the reference, else the bisect's."""
    if doc.get("reference_trial"):
        cand = (doc.get("reproduction") or {}).get("candidate") or _candidate(doc)
        return cand, doc["reference_trial"]
    return _candidate(doc), doc.get("baseline") or {}


def _mismatch(doc: dict[str, Any], who: str) -> tuple[str, str]:
    cand, ref = mismatch_pair(doc)
    r_loss, c_loss = ref.get("losses") or [], cand.get("losses") or []
    tol = fmt((doc.get("symptom_settings") or {}).get("mismatch"))
    cur = f"{who}, the per-step loss no longer matches the reference configuration (tolerance {tol} relative)"
    if r_loss and c_loss:
        cur += f": last loss {fmt(c_loss[-1])} vs {fmt(r_loss[-1])} after {min(len(r_loss), len(c_loss))} steps"
    refcfg = doc.get("reference_config") or []
    cur += (
        ". The reference is the same script with "
        + (
            f"only {names(refcfg)} (features that change the loss by design) on"
            if refcfg
            else "every engineering feature off"
        )
        + ": `reference.py`."
    )
    alone = (
        " Without the culprit, the losses match the reference step for step."
        if len(doc.get("culprits") or []) == 1
        else _alone(doc)
    )
    return cur + alone, (
        "The per-step loss matches the reference (same math, only engineering "
        "features differ), as it does without the culprit."
    )


def _mb(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) else f"{x / 1e6:.1f} MB"


def _memory(doc: dict[str, Any], who: str) -> tuple[str, str]:
    cand, base = _candidate(doc), doc.get("baseline") or {}
    if cand.get("crashed"):
        cur = f"{who}, training is killed for memory: `{cand.get('error') or 'exit ' + str(cand.get('exit_code'))}`."
    else:
        g, gb = cand.get("growth_per_step"), base.get("growth_per_step")
        cur = (
            f"{who}, the process's peak resident memory is {_mb(cand.get('peak_rss_bytes'))} against "
            f"{_mb(base.get('peak_rss_bytes'))} without, and it grows by {_mb(g)} per step "
            f"(baseline {_mb(gb)} per step; robust slope over the steady steps)."
        )
        if cand.get("device_peak_bytes"):
            cur += f" Device peak: {_mb(cand['device_peak_bytes'])} against {_mb(base.get('device_peak_bytes'))}."
    return cur + _alone(doc), "Memory stays flat after the first steps, as in the baseline configuration."


def _other(doc: dict[str, Any], who: str) -> tuple[str, str]:
    return f"{who}, the run shows {doc.get('symptom')}.", "The run behaves as the baseline."


_BEHAVIOUR: dict[str, Callable[[dict[str, Any], str], tuple[str, str]]] = {
    "nan": _nan,
    "crash": _crash,
    "timeout": _timeout,
    "slowdown": _slowdown,
    "mismatch": _mismatch,
    "memory": _memory,
}


# --------------------------------------------------------------------------- logs


def _series(xs: list[Any], scale: float = 1.0, n: int = 12) -> str:
    shown = ", ".join("NaN" if x is None else fmt(float(x) * scale) for x in xs[:n])
    return shown + (" ..." if len(xs) > n else "")


def series_log(doc: dict[str, Any]) -> list[str]:
    """The measured series a maintainer compares, as text."""
    sym = doc.get("symptom")
    cand = doc.get("culprit_trial") or {}
    base = doc.get("baseline") or {}
    if sym == "slowdown":
        lines = [
            f"step time, ms (culprit configuration): {_series(cand.get('step_times') or [], 1000)}",
            f"step time, ms (baseline):              {_series(base.get('step_times') or [], 1000)}",
        ]
        timing = (doc.get("reproduction") or {}).get("timing") or {}
        if timing.get("candidate"):
            lines.append(
                f"re-run medians, ms: repro.py {_series(timing['candidate'], 1000)}; "
                f"reference.py {_series(timing.get('baseline') or [], 1000)}"
            )
        return lines
    if sym == "memory":
        return [
            f"RSS after each step, MB (culprit configuration): {_series(cand.get('rss_per_step') or [], 1e-6)}",
            f"RSS after each step, MB (baseline):              {_series(base.get('rss_per_step') or [], 1e-6)}",
        ]
    if sym == "mismatch":
        cand, ref = mismatch_pair(doc)
        lines = [
            f"per-step loss, repro.py:     {_series(cand.get('losses') or [])}",
            f"per-step loss, reference.py: {_series(ref.get('losses') or [])}",
        ]
        if "custom_loop" in (doc.get("culprits") or []):
            from tfrepro.report.loop_table import first_diverging_rows

            tol = float((doc.get("symptom_settings") or {}).get("mismatch") or 0.05)
            lines += ["", *first_diverging_rows(cand.get("losses") or [], ref.get("losses") or [], tol)]
        return lines
    if cand.get("losses"):
        return [f"per-step loss (culprit configuration): {_series(cand['losses'])}"]
    return []


def log_output(doc: dict[str, Any]) -> str:
    """The error output (localisation excerpt, traceback tail, the re-run's
    error) and the measured series, as plain text."""
    log = []
    loc = doc.get("localization") or {}
    if loc.get("found"):
        log.append(loc.get("excerpt") or "")
    cand = doc.get("culprit_trial") or {}
    detail = (cand.get("extra") or {}).get("error_detail")
    if detail:  # a crash's traceback, last lines
        log.append("\n".join(str(detail).strip().splitlines()[-40:]))
    elif cand.get("error"):
        log.append(cand["error"])
    rerun_error = ((doc.get("reproduction") or {}).get("candidate") or {}).get("error")
    if rerun_error and rerun_error not in log:
        log.append(rerun_error)
    log.extend(series_log(doc))
    return "\n".join(log) if log else "(no error output: see the per-step loss in loss.png)"
