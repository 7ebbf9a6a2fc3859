"""ISSUE.md from the report document (pure: a dict in, markdown out).

The headings follow TensorFlow's bug issue form field by field, so the text
can be pasted section by section; after them comes what that form forgets
(Keras version, training setup, variables, localisation, bisect evidence).
Every value shown is read from the document; a field the run could not
establish says so rather than guess.
"""

from __future__ import annotations

import math
from typing import Any

SYMPTOM_WORDS = {
    "nan": "NaN/Inf loss",
    "crash": "crash",
    "timeout": "hang (timeout)",
    "mismatch": "loss mismatch",
    "slowdown": "slowdown",
}


def _code(text: str, lang: str = "") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else f"{x:.{digits}g}"
    return str(x)


def _names(xs: list[str]) -> str:
    return " + ".join(f"`{x}`" for x in xs) if xs else "(none)"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1000 * seconds:.2f} ms"


def title(doc: dict[str, Any]) -> str:
    env = doc.get("environment") or {}
    tf = env.get("tf_version") or "TF ?"
    what = SYMPTOM_WORDS.get(doc.get("symptom") or "", doc.get("symptom") or "problem")
    culprits = doc.get("culprits") or []
    if doc.get("first_bad_commit"):
        return f"{_cap(what)} since commit {doc['first_bad_commit'][:12]} (TensorFlow {tf})"
    with_ = f" with {' + '.join(culprits)}" if culprits else ""
    return f"{_cap(what)}{with_} (TensorFlow {tf})"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _gpu_line(env: dict[str, Any]) -> str:
    gpus = env.get("gpus") or []
    if not gpus:
        devices = env.get("devices") or []
        kinds = ", ".join(sorted({d.get("type", "?") for d in devices})) or "unknown"
        return f"no GPU visible to TensorFlow (devices: {kinds})"
    parts = []
    for g in gpus:
        s = g.get("name") or "GPU"
        if g.get("memory"):
            s += f", {g['memory']}"
        if g.get("compute_capability"):
            s += f" (compute capability {g['compute_capability']})"
        parts.append(s)
    return "; ".join(parts)


def _cuda_line(env: dict[str, Any]) -> str:
    b = env.get("build_info") or {}
    if not b or "error" in b:
        return "unknown (tf.sysconfig.get_build_info() unavailable)"
    if not b.get("is_cuda_build") and not b.get("cuda_version"):
        return "n/a (TensorFlow built without CUDA)"
    s = f"CUDA {b.get('cuda_version', '?')} / cuDNN {b.get('cudnn_version', '?')} (build info)"
    if not env.get("gpus"):
        s += "; no GPU in use on this machine"
    return s


def _behaviour(doc: dict[str, Any]) -> tuple[str, str]:
    """(current, expected) sentences."""
    sym = doc.get("symptom")
    culprits = doc.get("culprits") or []
    cand = doc.get("culprit_trial") or doc.get("failing") or {}
    base = doc.get("baseline") or {}
    ev = doc.get("evidence") or {}
    with_ = f"With {_names(culprits)} enabled" if culprits else "In the failing configuration"
    if doc.get("first_bad_commit"):
        subject = (doc.get("commit") or {}).get("subject")
        with_ = f"Since commit `{doc['first_bad_commit'][:12]}`" + (f" ({subject})" if subject else "")
    alone = ""
    ablation = ev.get("ablation") or {}
    if len(culprits) > 1:
        alone = " Removing any one of them makes the symptom disappear"
        if all(ablation.get(c) == "ok" for c in culprits):
            alone += "; each alone on the baseline trains normally: only together do they fail"
        alone += "."
    elif culprits:
        alone = " Without it, the same script trains normally."
    base_loss = base.get("losses") or []
    base_txt = (f"the loss goes from {_fmt(base_loss[0])} to {_fmt(base_loss[-1])} over {len(base_loss)} steps"
                if base_loss else "training completes")
    if sym == "nan":
        step = cand.get("first_nonfinite_step")
        if step is not None:
            cur = f"{with_}, the training loss becomes NaN/Inf at step {step}."
        else:
            cur = f"{with_}, the weights hold NaN/Inf at the end of training (the loss itself stays finite)."
        bad_w = cand.get("nonfinite_weights") or []
        if bad_w:
            cur += " Non-finite variables: " + ", ".join(f"`{w}`" for w in bad_w[:8]) + "."
        return cur + alone, f"The loss stays finite, as in the baseline configuration ({base_txt})."
    if sym == "crash":
        return (f"{with_}, training raises: `{cand.get('error') or 'see log'}`.{alone}",
                f"Training runs to the end, as in the baseline configuration ({base_txt}).")
    if sym == "timeout":
        return (f"{with_}, training does not finish within {_fmt((doc.get('settings') or {}).get('timeout_s'))} s.{alone}",
                "Training finishes in about the baseline's time.")
    if sym == "slowdown":
        timing = ev.get("timing") or {}
        ratio = timing.get("ratio")
        b, c = base.get("median_step_time"), cand.get("median_step_time")
        if ratio is None and b and c:
            ratio = c / b
        cur = (f"{with_}, the median steady-state step time is {_ms(c)} against {_ms(b)} without"
               f" ({_fmt(ratio, 3)}x"
               + (f", one-sided rank test p={_fmt(timing.get('p_value'), 3)}" if timing.get("p_value") is not None else "")
               + f"; warm-up steps excluded).{alone}")
        return cur, "The step time stays close to the baseline's."
    if sym == "mismatch":
        ref = doc.get("reference_trial") or base
        if doc.get("reference_trial"):  # compare two runs of the same re-run
            cand = (doc.get("reproduction") or {}).get("candidate") or cand
        r_loss, c_loss = ref.get("losses") or [], cand.get("losses") or []
        cur = (f"{with_}, the per-step loss no longer matches the reference configuration "
               f"(tolerance {_fmt((doc.get('symptom_settings') or {}).get('mismatch'))} relative)")
        if r_loss and c_loss:
            cur += f": last loss {_fmt(c_loss[-1])} vs {_fmt(r_loss[-1])} after {min(len(r_loss), len(c_loss))} steps"
        refcfg = doc.get("reference_config") or []
        cur += (". The reference is the same script with " +
                (f"only {_names(refcfg)} (features that change the loss by design) on" if refcfg
                 else "every engineering feature off") + ": `reference.py`.")
        if len(culprits) == 1:
            alone = " Without the culprit, the losses match the reference step for step."
        return cur + alone, ("The per-step loss matches the reference (same math, only engineering "
                             "features differ), as it does without the culprit.")
    return f"{with_}, the run shows {sym}.", "The run behaves as the baseline."


def _series(xs: list[Any], scale: float = 1.0, n: int = 12) -> str:
    shown = ", ".join("NaN" if x is None else _fmt(float(x) * scale) for x in xs[:n])
    return shown + (" ..." if len(xs) > n else "")


def _series_log(doc: dict[str, Any]) -> list[str]:
    """The measured series a maintainer compares, as text."""
    sym = doc.get("symptom")
    cand = doc.get("culprit_trial") or {}
    base = doc.get("baseline") or {}
    if sym == "slowdown":
        lines = [f"step time, ms (culprit configuration): {_series(cand.get('step_times') or [], 1000)}",
                 f"step time, ms (baseline):              {_series(base.get('step_times') or [], 1000)}"]
        timing = (doc.get("reproduction") or {}).get("timing") or {}
        if timing.get("candidate"):
            lines.append(f"re-run medians, ms: repro.py {_series(timing['candidate'], 1000)}; "
                         f"reference.py {_series(timing.get('baseline') or [], 1000)}")
        return lines
    if sym == "mismatch":
        ref = doc.get("reference_trial") or base
        if doc.get("reference_trial"):  # compare two runs of the same re-run
            cand = (doc.get("reproduction") or {}).get("candidate") or cand
        return [f"per-step loss, repro.py:     {_series(cand.get('losses') or [])}",
                f"per-step loss, reference.py: {_series(ref.get('losses') or [])}"]
    if cand.get("losses"):
        return [f"per-step loss (culprit configuration): {_series(cand['losses'])}"]
    return []


def render_issue(doc: dict[str, Any]) -> str:
    env = doc.get("environment") or {}
    repro = doc.get("repro") or {}
    rep = doc.get("reproduction") or {}
    loc = doc.get("localization")
    sym = doc.get("symptom") or "?"
    current, expected = _behaviour(doc)
    tf_dist = env.get("tf_dist") or {}
    keras_v = env.get("keras_version") or (env.get("keras_dist") or {}).get("version")
    tfk = env.get("tf_keras_dist")
    build = env.get("build_info") or {}
    out: list[str] = [f"# {title(doc)}", ""]
    out.append(f"<!-- generated by tfrepro {doc.get('tfrepro_version', '')} from run {doc.get('run_id', '?')}; "
               "paste the sections into the TensorFlow (or Keras) bug issue form -->")
    out.append("")

    def field(name: str, value: str) -> None:
        out.extend([f"### {name}", "", value, ""])

    field("Issue type", "Performance" if sym == "slowdown" else "Bug")
    field("Have you reproduced the bug with TensorFlow Nightly?",
          "Not checked by tfrepro. To check: `pip install tf-nightly` in a fresh environment, then `python repro.py`.")
    field("Source", tf_dist.get("source") or "unknown")
    tf_version = env.get("tf_version") or tf_dist.get("version") or "unknown"
    if env.get("tf_git_version"):
        tf_version += f" ({env['tf_git_version']})"
    if tf_dist.get("name") and tf_dist.get("name") != "tensorflow":
        tf_version += f", package `{tf_dist['name']}`"
    field("TensorFlow version", tf_version)
    field("Custom code", "Yes (the standalone script below)")
    field("OS platform and distribution", f"{env.get('os', 'unknown')} ({env.get('platform', '?')}, {env.get('machine', '?')})")
    field("Mobile device", "n/a")
    field("Python version", env.get("python") or "unknown")
    field("Bazel version", "n/a (binary install)" if "binary" in (tf_dist.get("source") or "") else "unknown")
    field("GCC/compiler version",
          ("n/a (binary install)" if "binary" in (tf_dist.get("source") or "") else "unknown")
          + (f"; TensorFlow built with {build['cpu_compiler']}" if build.get("cpu_compiler") else ""))
    field("CUDA/cuDNN version", _cuda_line(env))
    field("GPU model and memory", _gpu_line(env))
    field("Current behavior?", current)
    field("Expected behavior", expected)

    out.extend(["### Standalone code to reproduce the issue", ""])
    out.append(_code(repro.get("code") or "# (export unavailable)", "python"))
    out.append("")
    extra_files = [f for f in repro.get("files") or [] if f != repro.get("entry", "repro.py")]
    if extra_files:
        out.append("The script imports these files, also in the bundle: " + ", ".join(f"`{f}`" for f in extra_files) + ".")
        out.append("")
    extra = repro.get("extra_imports") or []
    needs = ("it needs only TensorFlow and NumPy." if not extra else
             "besides TensorFlow and NumPy it imports " + ", ".join(f"`{x}`" for x in extra)
             + " (a maintainer will ask for a script without them).")
    out.append(f"Run it with `{repro.get('command') or 'python repro.py'}`: {needs}")
    out.append("")
    if rep:
        verdict = {True: "**yes**", False: "**no**", None: "**undecided**"}[rep.get("reproduced")]
        out.append(f"Re-run of this exact file in a fresh process, outside the project: reproduced {verdict}"
                   f" — {rep.get('detail')}.")
    else:
        out.append("This file was not re-run on its own (`tfrepro report --no-rerun`).")
    out.append("")

    out.extend(["### Relevant log output", ""])
    log = []
    if loc and loc.get("found"):
        log.append(loc.get("excerpt") or "")
    cand = doc.get("culprit_trial") or {}
    detail = (cand.get("extra") or {}).get("error_detail")
    if detail:  # a crash's traceback, last lines
        log.append("\n".join(str(detail).strip().splitlines()[-40:]))
    elif cand.get("error"):
        log.append(cand["error"])
    if (rep.get("candidate") or {}).get("error") and rep["candidate"]["error"] not in log:
        log.append(rep["candidate"]["error"])
    log.extend(_series_log(doc))
    out.append(_code("\n".join(log) if log else "(no error output: see the per-step loss in loss.png)"))
    out.append("")

    out.extend(["## Beyond the issue form", "", "### Versions and training setup", ""])
    setup = doc.get("setup") or {}
    rows = [
        ("Keras", f"{keras_v or 'unknown'}" + (f"; tf_keras {tfk['version']}" if tfk else "")
         + (f" — script uses {setup['keras_flavour']}" if setup.get("keras_flavour") else "")),
        ("NumPy", (env.get("numpy_dist") or {}).get("version", "unknown")),
        ("Precision policy", setup.get("precision_policy", "unknown")),
        ("Distribution / replicas", f"{setup.get('distribution', 'unknown')}; replicas: {setup.get('replicas', '?')}"),
        ("XLA", setup.get("xla", "unknown")),
        ("Determinism", setup.get("determinism", "unknown")
         + ("; tfrepro's trials ran with fixed seeds and op determinism"
            if (doc.get("settings") or {}).get("deterministic") else "")),
        ("Eager execution", setup.get("eager", "unknown")),
        ("Devices", ", ".join(f"{d.get('name')}" for d in env.get("devices") or []) or "unknown"),
        ("CPU cores", _fmt(env.get("cpu_count"))),
    ]
    out.append("| | |")
    out.append("|---|---|")
    out.extend(f"| {k} | {v} |" for k, v in rows)
    out.append("")
    env_vars = doc.get("env_vars") or {}
    out.append("Relevant environment variables (allow-list; secret-looking values redacted):")
    out.append("")
    out.append(_code("\n".join(f"{k}={v}" for k, v in env_vars.items()) or "(none set)"))
    out.append("")
    if env.get("probe_error"):
        out.extend([f"Environment probe: {env['probe_error']}", ""])

    if sym == "nan":
        out.extend(["### Where the first non-finite value appears", ""])
        if loc and loc.get("found"):
            out.append(f"Re-running `repro.py` under `tf.debugging.enable_check_numerics()` with XLA off: "
                       f"{loc.get('headline')}.")
            out.append("")
            if (loc.get("settings") or {}).get("loss_scale_start"):
                out.append("(For this run the loss-scale optimizer started at scale 1, so the overflowing "
                           "scaled gradients that dynamic loss scaling expects and skips do not hide the "
                           "first real non-finite value.)")
                out.append("")
            if loc.get("code"):
                out.append(_code(f"{loc.get('file')}:{loc.get('line')}: {loc['code']}", "python"))
                out.append("")
            det = [f"op type `{loc.get('op_type')}`", f"node `{loc.get('node')}`"]
            if loc.get("dtype"):
                det.append(f"dtype {loc['dtype']}")
            if loc.get("shape"):
                det.append(f"shape {loc['shape']}")
            if loc.get("input_tensor"):
                det.append(f"input `{loc['input_tensor']}`")
            out.extend(["- " + "; ".join(det), ""])
        elif loc:
            out.extend([f"Localisation with check_numerics (XLA off) found nothing: {loc.get('note')}.", ""])
        else:
            out.extend(["Localisation was not run.", ""])

    out.extend(["### Bisect evidence", ""])
    ev = doc.get("evidence") or {}
    out.append(f"- Symptom hunted: **{sym}**; status `{doc.get('status')}`")
    if doc.get("first_bad_commit"):
        out.append(f"- First bad commit: `{doc['first_bad_commit']}`")
    out.append(f"- Culprits (minimal: removing any one makes the symptom disappear): {_names(doc.get('culprits') or [])}")
    out.append(f"- Minimal failing configuration: {_names(doc.get('culprit_config') or [])}")
    out.append(f"- Trials: {_fmt(ev.get('trials'))}, wall time {_fmt(ev.get('wall_s'), 3)} s")
    if ev.get("reproduction_rate") is not None:
        out.append(f"- Reproduction rate of the failing configuration: {_fmt(ev['reproduction_rate'], 3)}"
                   + (" (flaky)" if ev.get("flaky") else ""))
    if ev.get("noise") is not None:
        out.append(f"- Loss noise between two baseline runs: {_fmt(ev['noise'], 3)}")
    out.append("")
    feats = doc.get("features") or {}
    ablation = ev.get("ablation") or {}
    if feats:
        out.append("| feature | description | culprit | in minimal config | alone on the baseline |")
        out.append("|---|---|---|---|---|")
        for name, info in feats.items():
            desc = (info.get("description") or "").replace("|", "\\|")
            if info.get("affects_loss"):
                desc += " (affects loss by design)"
            out.append(f"| `{name}` | {desc} | {'**yes**' if name in (doc.get('culprits') or []) else ''} | "
                       f"{'yes' if name in (doc.get('culprit_config') or []) else ''} | {ablation.get(name, '')} |")
        out.append("")
    table = ev.get("trials_table") or []
    if table:
        out.append("<details><summary>Every trial</summary>")
        out.append("")
        out.append("| # | features on | role | verdict | cached |")
        out.append("|---|---|---|---|---|")
        for i, t in enumerate(table, 1):
            out.append(f"| {i} | {', '.join(t.get('enabled') or []) or '(baseline)'} | {t.get('role') or ''} | "
                       f"{t.get('verdict')} | {'yes' if t.get('cached') else ''} |")
        out.append("")
        out.append("</details>")
        out.append("")
    if repro.get("diff"):
        what = ("The change from the good commit to the first bad commit" if doc.get("first_bad_commit")
                else "The change that turns the culprit on")
        out.append(f"{what} (`{repro.get('reference', 'reference.py')}` → `repro.py`):")
        out.append("")
        out.append(_code(repro["diff"], "diff"))
        out.append("")

    out.extend(["### Files in this bundle", ""])
    for name, what in (doc.get("artifacts") or {}).items():
        out.append(f"- `{name}`: {what}")
    out.append("")
    redacted = doc.get("redacted_env") or []
    if redacted:
        out.append(f"_{len(redacted)} secret-looking environment variable(s) were never recorded; "
                   "any of their values found in the bundle's texts was replaced by `<redacted>`._")
        out.append("")
    return "\n".join(out)
