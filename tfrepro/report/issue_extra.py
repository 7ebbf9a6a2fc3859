"""ISSUE.md after the issue form: what the form forgets (pure markdown).

The re-run, the training setup (precision policy, replicas, XLA,
determinism), environment variables, where a NaN is born, the bisect
evidence, the diff that turns the culprit on, and the files in the bundle.
"""

from __future__ import annotations

from typing import Any

from tfrepro.report.issue_text import names
from tfrepro.report.standin import issue_lines as data_lines
from tfrepro.report.textfmt import fmt


def code(text: str, lang: str = "") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def beyond_the_form(doc: dict[str, Any]) -> list[str]:
    out = ["## Beyond the issue form", ""]
    for section in (
        reproduction,
        data_lines,
        training_setup,
        environment_variables,
        localisation,
        bisect_evidence,
        culprit_diff,
        bundle_files,
    ):
        out.extend(section(doc))
    return out


def reproduction(doc: dict[str, Any]) -> list[str]:
    repro = doc.get("repro") or {}
    rep = doc.get("reproduction") or {}
    out = ["### Reproduction", ""]
    extra = repro.get("extra_imports") or []
    needs = (
        "it needs only TensorFlow and NumPy."
        if not extra
        else "besides TensorFlow and NumPy it imports "
        + ", ".join(f"`{x}`" for x in extra)
        + " (a maintainer will ask for a script without them)."
    )
    out.append(f"Run it with `{repro.get('command') or 'python repro.py'}`: {needs}")
    extra_files = [f for f in repro.get("files") or [] if f != repro.get("entry", "repro.py")]
    if extra_files:
        out.append(
            "The script imports these files, also in the bundle (attach them): "
            + ", ".join(f"`{f}`" for f in extra_files)
            + "."
        )
    out.append("")
    out.append(rerun_sentence(rep))
    if "repro.ipynb" in (doc.get("artifacts") or {}):
        out.append("")
        out.append(
            "The form asks for a notebook link: upload `repro.ipynb` as a gist (https://gist.github.com, "
            "drag the file in), then open it in Colab (File > Open notebook > GitHub, or "
            "https://colab.research.google.com/gist/USER/GIST_ID) and link that."
        )
    return out + [""]


def rerun_sentence(rep: dict[str, Any]) -> str:
    if not rep:
        return "repro.py was not re-run on its own (`tfrepro report --no-rerun`)."
    verdict = {True: "yes", False: "no", None: "undecided"}[rep.get("reproduced")]
    return (
        f"Re-run of this exact repro.py in a fresh process, outside the project: "
        f"reproduced {verdict}, {rep.get('detail')}."
    )


def training_setup(doc: dict[str, Any]) -> list[str]:
    env = doc.get("environment") or {}
    setup = doc.get("setup") or {}
    keras_v = env.get("keras_version") or (env.get("keras_dist") or {}).get("version")
    tfk = env.get("tf_keras_dist")
    deterministic = (doc.get("settings") or {}).get("deterministic")
    rows = [
        (
            "Keras",
            f"{keras_v or 'unknown'}"
            + (f"; tf_keras {tfk['version']}" if tfk else "")
            + (f" — script uses {setup['keras_flavour']}" if setup.get("keras_flavour") else ""),
        ),
        ("NumPy", (env.get("numpy_dist") or {}).get("version", "unknown")),
        ("Precision policy", setup.get("precision_policy", "unknown")),
        ("Distribution / replicas", f"{setup.get('distribution', 'unknown')}; replicas: {setup.get('replicas', '?')}"),
        ("XLA", setup.get("xla", "unknown")),
        (
            "Determinism",
            setup.get("determinism", "unknown")
            + ("; tfrepro's trials ran with fixed seeds and op determinism" if deterministic else ""),
        ),
        ("Eager execution", setup.get("eager", "unknown")),
        ("Devices", ", ".join(f"{d.get('name')}" for d in env.get("devices") or []) or "unknown"),
        ("CPU cores", fmt(env.get("cpu_count"))),
    ]
    out = ["### Versions and training setup", "", "| | |", "|---|---|"]
    out.extend(f"| {k} | {v} |" for k, v in rows)
    return out + [""]


def environment_variables(doc: dict[str, Any]) -> list[str]:
    env_vars = doc.get("env_vars") or {}
    out = [
        "Relevant environment variables (allow-list; secret-looking values redacted):",
        "",
        code("\n".join(f"{k}={v}" for k, v in env_vars.items()) or "(none set)"),
        "",
    ]
    probe_error = (doc.get("environment") or {}).get("probe_error")
    if probe_error:
        out.extend([f"Environment probe: {probe_error}", ""])
    return out


def localisation(doc: dict[str, Any]) -> list[str]:
    if doc.get("symptom") != "nan":
        return []
    loc = doc.get("localization")
    out = ["### Where the first non-finite value appears", ""]
    if not loc:
        return out + ["Localisation was not run.", ""]
    if not loc.get("found"):
        return out + [f"Localisation with check_numerics (XLA off) found nothing: {loc.get('note')}.", ""]
    out += [
        (f"Re-running `repro.py` under `tf.debugging.enable_check_numerics()` with XLA off: {loc.get('headline')}."),
        "",
    ]
    if (loc.get("settings") or {}).get("loss_scale_start"):
        out += [
            (
                "(For this run the loss-scale optimizer started at scale 1, so the overflowing scaled gradients "
                "that dynamic loss scaling expects and skips do not hide the first real non-finite value.)"
            ),
            "",
        ]
    if loc.get("code"):
        out += [code(f"{loc.get('file')}:{loc.get('line')}: {loc['code']}", "python"), ""]
    det = [f"op type `{loc.get('op_type')}`", f"node `{loc.get('node')}`"]
    for key, label in (("dtype", "dtype {}"), ("shape", "shape {}"), ("input_tensor", "input `{}`")):
        if loc.get(key):
            det.append(label.format(loc[key]))
    return out + ["- " + "; ".join(det), ""]


def bisect_evidence(doc: dict[str, Any]) -> list[str]:
    ev = doc.get("evidence") or {}
    out = [
        "### Bisect evidence",
        "",
        f"- Symptom hunted: **{doc.get('symptom') or '?'}**; status `{doc.get('status')}`",
    ]
    if doc.get("first_bad_commit"):
        out.append(f"- First bad commit: `{doc['first_bad_commit']}`")
    out.append(
        f"- Culprits (minimal: removing any one makes the symptom disappear): {names(doc.get('culprits') or [])}"
    )
    out.append(f"- Minimal failing configuration: {names(doc.get('culprit_config') or [])}")
    out.append(f"- Trials: {fmt(ev.get('trials'))}, wall time {fmt(ev.get('wall_s'), 3)} s")
    if ev.get("reproduction_rate") is not None:
        out.append(
            f"- Reproduction rate of the failing configuration: {fmt(ev['reproduction_rate'], 3)}"
            + (" (flaky)" if ev.get("flaky") else "")
        )
    if ev.get("noise") is not None:
        out.append(f"- Loss noise between two baseline runs: {fmt(ev['noise'], 3)}")
    if ev.get("replicas"):
        out.append(f"- Every trial ran with one device split into {ev['replicas']} logical devices (`--replicas`)")
    for d in ev.get("compile_differs") or []:  # jit_compile resolved otherwise than in the failing run
        out.append(
            f"- {names(d['configuration'])} compiled with jit_compile={d['jit_compile']}, "
            f"the failing configuration with {d['failing_jit_compile']}"
        )
    return out + [""] + _feature_table(doc) + _trials_table(ev.get("trials_table") or [])


def _feature_table(doc: dict[str, Any]) -> list[str]:
    feats = doc.get("features") or {}
    if not feats:
        return []
    ablation = (doc.get("evidence") or {}).get("ablation") or {}
    culprits, config = doc.get("culprits") or [], doc.get("culprit_config") or []
    out = ["| feature | description | culprit | in minimal config | alone on the baseline |", "|---|---|---|---|---|"]
    for name, info in feats.items():
        desc = (info.get("description") or "").replace("|", "\\|")
        if info.get("affects_loss"):
            desc += " (affects loss by design)"
        out.append(
            f"| `{name}` | {desc} | {'**yes**' if name in culprits else ''} | "
            f"{'yes' if name in config else ''} | {ablation.get(name, '')} |"
        )
    return out + [""]


def _trials_table(table: list[dict[str, Any]]) -> list[str]:
    if not table:
        return []
    out = [
        "<details><summary>Every trial</summary>",
        "",
        "| # | features on | role | verdict | cached |",
        "|---|---|---|---|---|",
    ]
    for i, t in enumerate(table, 1):
        out.append(
            f"| {i} | {', '.join(t.get('enabled') or []) or '(baseline)'} | {t.get('role') or ''} | "
            f"{t.get('verdict')} | {'yes' if t.get('cached') else ''} |"
        )
    return out + ["", "</details>", ""]


def culprit_diff(doc: dict[str, Any]) -> list[str]:
    repro = doc.get("repro") or {}
    if not repro.get("diff"):
        return []
    what = (
        "The change from the good commit to the first bad commit"
        if doc.get("first_bad_commit")
        else "The change that turns the culprit on"
    )
    return [f"{what} (`{repro.get('reference', 'reference.py')}` → `repro.py`):", "", code(repro["diff"], "diff"), ""]


def bundle_files(doc: dict[str, Any]) -> list[str]:
    out = ["### Files in this bundle", ""]
    out.extend(f"- `{name}`: {what}" for name, what in (doc.get("artifacts") or {}).items())
    out.append("")
    n = doc.get("redacted_env_count") or 0
    if n:
        out += [
            (
                f"_{n} secret-looking environment variable(s) were never recorded; "
                "any of their values found in the bundle's texts was replaced by `<redacted>`._"
            ),
            "",
        ]
    return out
