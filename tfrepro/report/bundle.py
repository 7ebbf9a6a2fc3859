"""`tfrepro report`: a bisect run directory in, a bug-report bundle out.

The bundle (default `<run>/report/`):

    repro.py         the minimal failing variant, exported (Contract 1; export.py)
    reference.py     the same script without the culprits (for a mismatch: the
                     reference configuration), to compare against
    ISSUE.md         the issue text (see issue.py)
    report.json      everything ISSUE.md says, as data (`document`: the run's
                     result, the exported repro, the re-run, the
                     localisation, the environment, the setup)
    result.json      the bisect result the report was made from
    loss.png         per-step loss, baseline against culprit configuration
    steps.png        step-time distributions (slowdowns)
    tensorboard/     one event-file run per trial

Every text written passes through one `Scrubber` (secrets, home directory).

A run whose answer is a known cost (tfrepro/catalog.py, `known_cost` in
result.json) gets EXPLANATION.md instead (`write_explanation`): an
explanation with the fix, not a drafted bug report (`--force` drafts one
anyway).

The bundle directory (`prepare_out`, `record_out`): what tfrepro may
delete there, and nothing else. A bundle records every file it wrote in
`MANIFEST`. Rewriting a bundle
deletes exactly those files; a directory holding anything else (a `.git/`,
a `src/`, a thesis) is refused, never emptied. A bundle written before the
manifest existed is recognised by its fixed file names only.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from tfrepro import __version__
from tfrepro.errors import UserError
from tfrepro.report import envreport, scan
from tfrepro.report import issue as issue_md
from tfrepro.report.answer import Evidence, Localization, NightlyRun, Report, Repro, Reproduction, of
from tfrepro.report.export import ENTRY, Export, entry_of, export_variants, load_at, write_files, write_scripts
from tfrepro.report.records import ResultJson, run_dirs
from tfrepro.report.rerun import Runner, nightly_rerun, rerun_settings, with_data
from tfrepro.report.scrub import Scrubber, capture_env, withheld_count
from tfrepro.report.secretscan import raise_on_findings, run_commits, scan_bundle
from tfrepro.report.standin import DataFacts
from tfrepro.report.tables import plots, write_events, write_replay
from tfrepro.settings import SymptomSettings, TrialSettings
from tfrepro.trials.state import STATE_DIR_NAME
from tfrepro.trials.values import read_json

Write = Callable[[str, str], None]  # (path in the bundle, text): build_report's, scrubbed
EXPLANATION = "EXPLANATION.md"


@dataclass(frozen=True)
class Bundle:
    out: Path
    report: Report  # report.json, as written


# --------------------------------------------------------------------------- finding the run


def find_run(path: str | Path | None = None) -> Path:
    """A run directory from what the user typed: a run dir itself, a project
    (its latest run), or nothing (the current directory's latest run)."""
    p = Path(path) if path is not None else Path(".")
    if (p / "result.json").is_file():
        return p
    for runs in (p / STATE_DIR_NAME / "runs", p / "runs", p):
        if runs.is_dir() and (found := run_dirs(runs)):
            return found[-1]
    if not p.exists():
        raise UserError(
            "no such run or project directory",
            path=p,
            hint="give a run directory (.tfrepro/runs/<id>) or the project that holds it",
        )
    raise UserError(
        f"no bisect run found in {p}", path=p, hint="run `tfrepro bisect` first; its runs are kept under .tfrepro/runs/"
    )


def load_result(run_dir: Path) -> ResultJson:
    path = run_dir / "result.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read the run's result: {e}", path=path) from None
    if not isinstance(result, dict) or "status" not in result:
        raise UserError("not a tfrepro bisect result (no `status`)", path=path)
    return result


def write_explanation(run_dir: Path, result: ResultJson, out: Path | None = None) -> Path:
    """Write EXPLANATION.md into `out` (default: RUN_DIR/report) and return its path."""
    cost = result["known_cost"]
    timing = result.get("timing") or {}
    ratio = f" (step time x{timing['ratio']:.2f})" if isinstance(timing.get("ratio"), (int, float)) else ""
    culprits = ", ".join(result.get("culprits") or cost.get("features") or [])
    text = f"""# {result.get("symptom") or "slowdown"} caused by {culprits}: a known cost, not a bug

The bisection found that {culprits} makes training slower{ratio}.
That is the documented cost of this feature on the hardware the trials ran on: {cost["reason"]}.

**Fix:** {cost["fix"]}.

Source: {cost["source"]}

No bug report was drafted. If you believe the cost is larger than it should be, `tfrepro report --force` drafts one anyway.
"""
    dest = prepare_out(Path(out) if out is not None else Path(run_dir) / "report")
    path = dest / EXPLANATION
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the bundle directory

MANIFEST = ".tfrepro-bundle.json"
# The files every bundle has besides its artifacts.
OWN_FILES = {
    "ISSUE.md": "this issue text",
    "report.json": "everything in ISSUE.md, as data",
    "result.json": "the bisect result this report was made from",
}
# What a bundle written before the manifest could hold (top-level names).
_LEGACY_NAMES = frozenset(
    {
        *OWN_FILES,
        ENTRY,
        "reference.py",
        "reference",
        "loss.png",
        "steps.png",
        "tensorboard",
        "repro.ipynb",
        EXPLANATION,
    }
)


def prepare_out(out: Path) -> Path:
    """`out`, resolved, existing and empty: an earlier bundle's own files are
    deleted, any other content makes this a `UserError` with nothing touched."""
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise UserError("--out names a file, not a directory", path=out, hint="give a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        ours = _bundle_files(out)
        foreign = sorted(p.relative_to(out).as_posix() for p in _all_files(out) if p not in ours)
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise UserError(
                f"--out directory holds files tfrepro did not write ({shown}); nothing was deleted",
                path=out,
                hint="give --out a new or empty directory, or an earlier bundle's own",
            )
        for p in ours:
            if p.is_symlink() or p.is_file():
                p.unlink()
        # directories the bundle made, deepest first, once they are empty
        for d in sorted({d for p in ours for d in p.parents if out in d.parents}, key=lambda d: -len(d.parts)):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    out.mkdir(parents=True, exist_ok=True)
    return out


def record_out(out: Path) -> None:
    """Write the manifest: every file now under `out` (which `prepare_out` left
    empty, so every one is the bundle's)."""
    files = sorted(p.relative_to(out).as_posix() for p in _all_files(out) if p.name != MANIFEST)
    (out / MANIFEST).write_text(json.dumps({"tool": "tfrepro", "files": files}, indent=1), encoding="utf-8")


def _all_files(out: Path) -> list[Path]:
    """Files and symlinks under `out`: a directory counts through what it
    holds (an empty one holds no data, and is left where it is)."""
    return [p for p in out.rglob("*") if p.is_symlink() or not p.is_dir()]


def _bundle_files(out: Path) -> set[Path]:
    manifest = out / MANIFEST
    if manifest.is_file():
        listed = (read_json(manifest) or {}).get("files")
        if listed is None:  # unreadable, or not a manifest
            return set()
        inside = {(out / rel) for rel in listed if ".." not in Path(rel).parts and not Path(rel).is_absolute()}
        return inside | {manifest}
    if set(out.iterdir()) == {out / EXPLANATION}:  # a known cost explained (`write_explanation`)
        return {out / EXPLANATION}
    if (out / "ISSUE.md").is_file() and (out / "report.json").is_file():
        return {p for p in _all_files(out) if p.relative_to(out).parts[0] in _LEGACY_NAMES}
    return set()


# --------------------------------------------------------------------------- the report

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Context:
    """What the run says: its result, the project it bisected, the settings."""

    run_dir: Path
    result: ResultJson
    symptom: str
    project: Any
    settings: TrialSettings
    symptoms: SymptomSettings
    entry: str


@dataclass(frozen=True)
class ReportOptions:
    """What `report` does besides the run it reports: re-run the export
    (`rerun`, `max_pairs` timing pairs for a slowdown), localise a NaN, probe
    the environment in a TensorFlow child when no re-run described it,
    re-run on the newest tf-nightly (`nightly`), keep the user's data
    (`no_data`), split the device into `replicas` (None: the run's own)."""

    rerun: bool = True
    localize: bool = True
    max_pairs: int = 5
    probe_environment: bool = True
    nightly: bool = False
    no_data: bool = False
    replicas: int | None = None


def build_report(
    run_dir: Path,
    how: ReportOptions = ReportOptions(),
    *,
    out: Path | None = None,
    environ: Mapping[str, str] | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
) -> Bundle:
    """Write the bundle for the run in `run_dir` and return it (`how`: see
    ReportOptions). `runner` replaces the real trial runner (tests); `environ`
    the process environment the report describes and scrubs against;
    `progress` hears one line per slow step (re-run, localisation, probe)."""
    environ = dict(os.environ if environ is None else environ)
    say = progress or (lambda _msg: None)
    scrubber = Scrubber.from_environ(environ)
    ctx = load_context(Path(run_dir), how.replicas)
    # the two variants as standalone scripts: repro.py and its reference, each splitting the device as the
    # trials did and taking the script's arguments (`tfrepro bisect train.py -- ARGS`) when given none
    export = export_variants(ctx.result, ctx.project, ctx.run_dir, ctx.symptom, ctx.entry, scrubber.scrub)
    args = scan.script_args(ctx.settings, ctx.entry)
    export = export.with_entry(
        lambda text: scan.default_args(scan.with_split(text, ctx.settings.replicas), ENTRY, args)
    )
    # a plain `python repro.py` ends with a line saying whether it showed the symptom
    export = export.with_entry(lambda text: scan.with_footer(text, ctx.symptom, ctx.result, export.ref_name), ref=False)
    out = prepare_out(Path(out) if out is not None else ctx.run_dir / "report")
    try:
        write: Write = lambda rel, text: write_files(out, {rel: scrubber.scrub(text)})  # every text scrubbed
        kw = dict(rerun=how.rerun, runner=runner, max_pairs=how.max_pairs, say=say)
        reproduction, export, trim, data = with_data(ctx, export, no_data=how.no_data, **kw)
        scripts = write_scripts(out, ctx.result, export, scrubber.scrub)  # data.npz too, beside each entry
        artifacts = {**scripts, **_write_data(out, ctx, data, how.no_data)}
        loc = None
        if how.localize and ctx.symptom == "nan":
            from tfrepro.report.localize import localize

            say("localising the first non-finite value (check_numerics, XLA off) ...")
            loc = localize(export.cand_files, export.data, settings=rerun_settings(ctx))
        artifacts.update(write_events(out / "tensorboard", ctx.run_dir, ctx.result))
        env_facts = environment_facts(reproduction, probe=how.probe_environment, environ=environ, say=say)
        facts = dict(reproduction=reproduction, loc=loc, env_facts=env_facts, environ=environ)
        report = document(ctx, export, scrubber=scrubber, **facts)
        artifacts.update(plots(out, report, ctx.result))
        artifacts.update(_write_notebook(write, ctx, export, report))
        repro = replace(report.repro, trimmed=trim["trimmed"], trim=trim)
        report = replace(report, repro=repro, data=data.to_dict(), artifacts={**artifacts, **OWN_FILES})
        if how.nightly:
            report = replace(report, nightly=nightly_rerun(ctx, export, max_pairs=how.max_pairs, say=say))
        doc = scrubber.scrub_obj(report.json())
        write("report.json", json.dumps(doc, indent=2))
        report = Report.of(doc)  # type: ignore[arg-type]  # as written: scrubbed
        write("ISSUE.md", issue_md.render_issue(report))
        write("result.json", json.dumps(ctx.result, indent=2))
    finally:
        record_out(out)
    # A finding the rules did not redact fails the report, naming file:line.
    raise_on_findings(scan_bundle(out, commits=run_commits(ctx.result)), bundle=out)
    return Bundle(out, report)


def load_context(run_dir: Path, replicas: int | None = None) -> Context:
    """The run's result and project; a healthy or failed run is refused.
    `replicas`: `report --replicas N` (None: the run's own)."""
    result = load_result(run_dir)
    status = result.get("status")
    if status in ("none", "error"):
        raise UserError(
            f"the run's status is {status!r}: there is no failure to report",
            path=run_dir / "result.json",
            hint="report a run whose status is 'found' (or 'baseline-fails')",
        )
    recorded = TrialSettings.from_dict(result["settings"]) if result.get("settings") else None
    # the script the trials ran (`tfrepro bisect train.py` with no tfrepro.toml records entry =
    # train.py; `... -- ARGS` the command `python train.py ARGS`), else the project's own entry
    ran = recorded.entry if recorded and (recorded.command is None or recorded.entry in recorded.command) else None
    # the run dir sits in <project>/.tfrepro/runs/<id>: that project is the one to report, even moved or copied
    root = run_dir.resolve().parent.parent
    root = root.parent if root.name == STATE_DIR_NAME or not result.get("project") else Path(result["project"])
    project = load_at(root, ran)
    fixed = [n for n in result.get("fixed_on") or [] if n in project.feature_names]
    if fixed:  # what the bisect kept ON in every trial (--only/--skip, preflight): so in the repro
        project = project.exclude(dict.fromkeys(fixed, "kept on in the run"))
    settings = recorded or project.manifest.trial
    if replicas is not None:
        settings = replace(settings, replicas=replicas)
    symptom = result.get("symptom") or "nan"
    return Context(run_dir, result, symptom, project, settings, project.manifest.symptoms, entry_of(settings))


def _write_notebook(write: Write, ctx: Context, export: Export, report: Report) -> dict[str, str]:
    """repro.ipynb, titled as the issue is."""
    import nbformat

    from tfrepro.report import notebook

    try:
        code = scan.notebook_code(export.cand_files[ENTRY], ENTRY, scan.script_args(ctx.settings, ctx.entry))
        nb = notebook.build(code, symptom=ctx.symptom, env=report.env, title=issue_md.title(report))
    except SyntaxError as e:
        return {"repro.ipynb": f"skipped: repro.py does not parse ({e.msg}, line {e.lineno})"}
    write("repro.ipynb", nbformat.writes(nb, version=4))
    return {"repro.ipynb": "the repro as a notebook, exact versions pinned; upload it as a gist to link it"}


def _write_data(out: Path, ctx: Context, data: DataFacts, no_data: bool) -> dict[str, str]:
    """What data.npz is (the records the reduction kept) and a NaN's replay.py + nan_state/ (its batch is user data: not with --no-data)."""
    artifacts: dict[str, str] = {}
    red = data.reduction
    if red is not None and red.out is not None:
        files, what = ", ".join(f"`{f.file}`" for f in red.files), "the few real records that still show the symptom"
        artifacts["data.npz"] = f"{red.records} of {red.of} records of {files}: {what}"
    if not no_data:
        artifacts.update(write_replay(out, ctx.run_dir, ctx.result))
    return artifacts


# --------------------------------------------------------------------------- report.json


def document(
    ctx: Context,
    export: Export,
    *,
    reproduction: Reproduction | None,
    loc: Localization | None,
    env_facts: dict[str, Any],
    environ: dict[str, str],
    scrubber: Scrubber,
) -> Report:
    """report.json: everything ISSUE.md says, as data."""
    result, project = ctx.result, ctx.project
    # the run's result fields answer.Evidence names; the replicas the trials ran with
    evidence = {f.name: result.get(f.name) for f in fields(Evidence)} | {"replicas": ctx.settings.replicas}
    reference = reproduction.reference if reproduction and ctx.symptom == "mismatch" else None
    command, code = rerun_settings(ctx).command, export.cand_files[ENTRY]
    return Report(
        tfrepro_version=__version__,
        run_id=ctx.run_dir.name,
        run_dir=str(ctx.run_dir),
        project=str(project.root),
        **{k: result.get(k) for k in ("status", "first_bad_commit", "commit", "follows")},
        symptom=ctx.symptom,
        culprits=list(result.get("culprits") or []),
        culprit_config=list(export.cand_cfg or []),
        reference_config=list(export.ref_cfg or []),
        nightly=_nightly(result),
        features={
            n: {"description": project.description(n), "affects_loss": n in project.affects_loss}
            for n in project.feature_names
        },
        settings=ctx.settings.to_dict(),
        symptom_settings=ctx.symptoms,
        baseline=result.get("baseline") or {},
        failing=result.get("failing") or {},
        culprit_trial=result.get("culprit_trial") or result.get("failing") or {},
        evidence=Evidence(**evidence),  # type: ignore[arg-type]
        environment=env_facts,
        env_vars=capture_env(environ, scrubber),
        redacted_env_count=withheld_count(environ),
        # precision, replicas, XLA...: read from the source, corrected by what the re-run and the localisation saw
        setup=scan.merge_runtime(
            scan.scan_setup(code), reproduction.trial if reproduction else None, loc.settings if loc else None
        ),
        reproduction=reproduction,
        localization=loc,
        repro=Repro(
            entry=ENTRY,
            files=sorted(export.cand_files),
            code=code,
            extra_imports=scan.extra_imports(export.cand_files),
            reference=export.ref_name,
            diff=export.diff,
            command=shlex.join(["python", *command[1:]]) if command else f"python {ENTRY}",
        ),
        reference_trial=reference or None,
    )


def _nightly(result: ResultJson) -> NightlyRun | None:
    """Whether a nightly build was tried: a `nightly` record of the run (an
    older result.json's), or a nightly among a version bisect's trials."""
    if isinstance(result.get("nightly"), dict):
        return of(NightlyRun, result["nightly"])
    for row in result.get("version_trials") or []:
        version = str(row.get("version") or "")
        if "dev" in version or "nightly" in version:
            verdict = row.get("verdict")
            return NightlyRun(version, verdict == result.get("symptom"), f"the version bisect's trial: {verdict}")
    return None


def environment_facts(
    reproduction: Reproduction | None, *, probe: bool, environ: Mapping[str, str], say: Progress
) -> dict[str, Any]:
    """The re-run's process described itself; otherwise a child of its own.
    The library path the CUDA libraries load from comes from `environ`."""
    facts = ((reproduction.candidate or {}).get("extra") or {}).get("environment") if reproduction else None
    if facts and "probe_error" not in facts:
        facts = {**facts, "collected_in": "the re-run of repro.py"}
    elif not probe:
        facts = {"probe_error": "environment probe not run"}
    else:
        say("describing the environment (versions, devices) in a TensorFlow child ...")
        facts = envreport.in_trial()
    if environ.get("LD_LIBRARY_PATH"):
        facts = {**facts, "ld_library_path": environ["LD_LIBRARY_PATH"]}
    return facts
