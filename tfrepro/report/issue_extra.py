"""ISSUE.md after the issue form: what the form forgets (pure markdown).

The re-run, the training setup (precision policy, replicas, XLA,
determinism), environment variables, where a NaN is born, the bisect
evidence, the diff that turns the culprit on, and the files in the bundle.
"""

from __future__ import annotations

from tfrepro.report.answer import Report, Reproduction
from tfrepro.report.issue_text import fmt, keras_line, names
from tfrepro.report.standin import issue_lines as data_lines


def code(text: str, lang: str = "") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def beyond_the_form(r: Report) -> list[str]:
    out = ["## Beyond the issue form", ""]
    for section in (
        reproduction,
        lambda r: data_lines({"data": r.data}),  # standin.py still reads the document's dict
        training_setup,
        environment_variables,
        localisation,
        bisect_evidence,
        culprit_diff,
        bundle_files,
    ):
        out.extend(section(r))
    return out


def reproduction(r: Report) -> list[str]:
    repro = r.repro
    out = ["### Reproduction", ""]
    extra = repro.extra_imports or []
    needs = (
        "it needs only TensorFlow and NumPy."
        if not extra
        else "besides TensorFlow and NumPy it imports "
        + ", ".join(f"`{x}`" for x in extra)
        + " (a maintainer will ask for a script without them)."
    )
    out.append(f"Run it with `{repro.command}`: {needs}")
    extra_files = [f for f in repro.files or [] if f != repro.entry]
    if extra_files:
        out.append(
            "The script imports these files, also in the bundle (attach them): "
            + ", ".join(f"`{f}`" for f in extra_files)
            + "."
        )
    out += ["", rerun_sentence(r.reproduction)]
    if "repro.ipynb" in (r.artifacts or {}):
        out.append("")
        out.append(
            "The form asks for a notebook link: upload `repro.ipynb` as a gist (https://gist.github.com, "
            "drag the file in), then open it in Colab (File > Open notebook > GitHub, or "
            "https://colab.research.google.com/gist/USER/GIST_ID) and link that."
        )
    return out + [""]


def rerun_sentence(rep: Reproduction | None) -> str:
    if not rep:
        return "repro.py was not re-run on its own (`tfrepro report --no-rerun`)."
    verdict = {True: "yes", False: "no", None: "undecided"}[rep.reproduced]
    return f"Re-run of this exact repro.py in a fresh process, outside the project: reproduced {verdict}, {rep.detail}."


def training_setup(r: Report) -> list[str]:
    env, setup = r.env, r.setup
    deterministic = (r.settings or {}).get("deterministic")
    rows = [
        ("Keras", keras_line(env) + (f" — script uses {setup.keras_flavour}" if setup.keras_flavour else "")),
        ("NumPy", (env.numpy_dist or {}).get("version", "unknown")),
        ("Precision policy", setup.precision_policy),
        ("Distribution / replicas", f"{setup.distribution}; replicas: {setup.replicas}"),
        ("XLA", setup.xla),
        (
            "Determinism",
            setup.determinism + ("; tfrepro's trials ran with fixed seeds and op determinism" if deterministic else ""),
        ),
        ("Eager execution", setup.eager),
        ("Devices", ", ".join(f"{d.get('name')}" for d in env.devices or []) or "unknown"),
        ("CPU cores", fmt(env.cpu_count)),
    ]
    out = ["### Versions and training setup", "", "| | |", "|---|---|"]
    out.extend(f"| {k} | {v} |" for k, v in rows)
    return out + [""]


def environment_variables(r: Report) -> list[str]:
    env_vars = r.env_vars or {}
    out = [
        "Relevant environment variables (allow-list; secret-looking values redacted):",
        "",
        code("\n".join(f"{k}={v}" for k, v in env_vars.items()) or "(none set)"),
        "",
    ]
    if r.env.probe_error:
        out.extend([f"Environment probe: {r.env.probe_error}", ""])
    return out


def localisation(r: Report) -> list[str]:
    if r.symptom != "nan":
        return []
    loc = r.localization
    out = ["### Where the first non-finite value appears", ""]
    if not loc:
        return out + ["Localisation was not run.", ""]
    if not loc.found:
        return out + [f"Localisation with check_numerics (XLA off) found nothing: {loc.note}.", ""]
    out += [f"Re-running `repro.py` under `tf.debugging.enable_check_numerics()` with XLA off: {loc.headline()}.", ""]
    if (loc.settings or {}).get("loss_scale_start"):
        out += [
            "(For this run the loss-scale optimizer started at scale 1, so the overflowing scaled gradients "
            "that dynamic loss scaling expects and skips do not hide the first real non-finite value.)",
            "",
        ]
    if loc.code:
        out += [code(f"{loc.file}:{loc.line}: {loc.code}", "python"), ""]
    det = [f"op type `{loc.op_type}`", f"node `{loc.node}`"]
    facts = ((loc.dtype, "dtype {}"), (loc.shape, "shape {}"), (loc.input_tensor, "input `{}`"))
    det += [label.format(value) for value, label in facts if value]
    return out + ["- " + "; ".join(det), ""]


def bisect_evidence(r: Report) -> list[str]:
    ev = r.evidence
    out = ["### Bisect evidence", "", f"- Symptom hunted: **{r.symptom or '?'}**; status `{r.status}`"]
    if r.first_bad_commit:
        out.append(f"- First bad commit: `{r.first_bad_commit}`")
    out.append(f"- Culprits (minimal: removing any one makes the symptom disappear): {names(r.culprits)}")
    out.append(f"- Minimal failing configuration: {names(r.culprit_config)}")
    out.append(f"- Trials: {fmt(ev.trials)}, wall time {fmt(ev.wall_s, 3)} s")
    if ev.reproduction_rate is not None:
        out.append(
            f"- Reproduction rate of the failing configuration: {fmt(ev.reproduction_rate, 3)}"
            + (" (flaky)" if ev.flaky else "")
        )
    if ev.noise is not None:
        out.append(f"- Loss noise between two baseline runs: {fmt(ev.noise, 3)}")
    if ev.replicas:
        out.append(f"- Every trial ran with one device split into {ev.replicas} logical devices (`--replicas`)")
    for d in ev.compile_differs or []:  # jit_compile resolved otherwise than in the failing run
        out.append(
            f"- {names(d['configuration'])} compiled with jit_compile={d['jit_compile']}, "
            f"the failing configuration with {d['failing_jit_compile']}"
        )
    out.append("")
    feats, ablation = r.features or {}, ev.ablation or {}
    culprits, config = r.culprits or [], r.culprit_config or []
    if feats:
        out += [
            "| feature | description | culprit | in minimal config | alone on the baseline |",
            "|---|---|---|---|---|",
        ]
        for name, info in feats.items():
            desc = (info.get("description") or "").replace("|", "\\|")
            if info.get("affects_loss"):
                desc += " (affects loss by design)"
            out.append(
                f"| `{name}` | {desc} | {'**yes**' if name in culprits else ''} | "
                f"{'yes' if name in config else ''} | {ablation.get(name, '')} |"
            )
        out.append("")
    if ev.trials_table:
        out += [
            "<details><summary>Every trial</summary>",
            "",
            "| # | features on | role | verdict | cached |",
            "|---|---|---|---|---|",
        ]
        for i, t in enumerate(ev.trials_table, 1):
            out.append(
                f"| {i} | {', '.join(t.get('enabled') or []) or '(baseline)'} | {t.get('role') or ''} | "
                f"{t.get('verdict')} | {'yes' if t.get('cached') else ''} |"
            )
        out += ["", "</details>", ""]
    return out


def culprit_diff(r: Report) -> list[str]:
    repro = r.repro
    if not repro.diff:
        return []
    what = (
        "The change from the good commit to the first bad commit"
        if r.first_bad_commit
        else "The change that turns the culprit on"
    )
    return [f"{what} (`{repro.reference}` → `repro.py`):", "", code(repro.diff, "diff"), ""]


def bundle_files(r: Report) -> list[str]:
    out = ["### Files in this bundle", "", *(f"- `{name}`: {what}" for name, what in (r.artifacts or {}).items()), ""]
    n = r.redacted_env_count or 0
    if n:
        out += [
            f"_{n} secret-looking environment variable(s) were never recorded; "
            "any of their values found in the bundle's texts was replaced by `<redacted>`._",
            "",
        ]
    return out
