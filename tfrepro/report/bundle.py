"""`tfrepro report`: a bisect run directory in, a bug-report bundle out.

The bundle (default `<run>/report/`):

    repro.py         the minimal failing variant, exported (Contract 1; export.py)
    reference.py     the same script without the culprits (for a mismatch: the
                     reference configuration), to compare against
    ISSUE.md         the issue text (see issue.py)
    report.json      everything ISSUE.md says, as data
    result.json      the bisect result the report was made from
    loss.png         per-step loss, baseline against culprit configuration
    steps.png        step-time distributions (slowdowns)
    tensorboard/     one event-file run per trial

Every text written passes through one `Scrubber` (secrets, home directory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tfrepro import __version__
from tfrepro.errors import UserError
from tfrepro.report import issue as issue_md
from tfrepro.report import outdir
from tfrepro.report.artifacts import load_trials, plots, write_events
from tfrepro.report.export import ENTRY, Export, entry_of, export_variants, write_scripts
from tfrepro.report.replay import write_replay
from tfrepro.report.replicas import export_with_split
from tfrepro.report.rerun import Reproduction, Runner
from tfrepro.report.scan import extra_imports, merge_runtime, merge_trial_setup, scan_setup
from tfrepro.report.scriptargs import comment_entry, notebook_code, script_args
from tfrepro.report.scrub import Scrubber, capture_env, withheld_count
from tfrepro.report.secretscan import raise_on_findings, run_commits, scan_bundle
from tfrepro.settings import SymptomSettings, TrialSettings
from tfrepro.trials.state import STATE_DIR_NAME

RUNS = Path(STATE_DIR_NAME) / "runs"


@dataclass(frozen=True)
class Bundle:
    out: Path
    doc: dict[str, Any]

    @property
    def reproduced(self) -> bool | None:
        return (self.doc.get("reproduction") or {}).get("reproduced")


# --------------------------------------------------------------------------- finding the run


def find_run(path: str | Path | None = None) -> Path:
    """A run directory from what the user typed: a run dir itself, a project
    (its latest run), or nothing (the current directory's latest run)."""
    p = Path(path) if path is not None else Path(".")
    if (p / "result.json").is_file():
        return p
    for runs in (p / RUNS, p / "runs", p):
        if runs.is_dir():
            found = sorted(
                (d for d in runs.iterdir() if (d / "result.json").is_file()), key=lambda d: (d.stat().st_mtime, d.name)
            )
            if found:
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


def load_result(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "result.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read the run's result: {e}", path=path) from None
    if not isinstance(result, dict) or "status" not in result:
        raise UserError("not a tfrepro bisect result (no `status`)", path=path)
    return result


# --------------------------------------------------------------------------- the report

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Context:
    """What the run says: its result, the project it bisected, the settings."""

    run_dir: Path
    result: dict[str, Any]
    symptom: str
    project: Any
    settings: TrialSettings
    symptoms: SymptomSettings
    entry: str


def build_report(
    run_dir: Path,
    *,
    out: Path | None = None,
    rerun: bool = True,
    localize: bool = True,
    environ: Mapping[str, str] | None = None,
    runner: Runner | None = None,
    python: str | None = None,
    max_pairs: int = 5,
    probe_environment: bool = True,
    progress: Progress | None = None,
    nightly: bool = False,
    no_data: bool = False,
    replicas: int | None = None,
) -> Bundle:
    """Write the bundle for the run in `run_dir` and return it. `runner`
    replaces the real trial runner (tests); `environ` the process environment
    the report describes and scrubs against; `probe_environment=False` skips
    the TensorFlow child describing versions and devices when no re-run did;
    `progress` hears one line per slow step (re-run, localisation, probe);
    `nightly` re-runs the export on the newest tf-nightly too."""
    environ = dict(os.environ if environ is None else environ)
    say = progress or (lambda _msg: None)
    scrubber = Scrubber.from_environ(environ)
    ctx = load_context(Path(run_dir))
    if replicas is not None:  # `report --replicas N` (default: the run's own)
        ctx = replace(ctx, settings=replace(ctx.settings, replicas=replicas))
    export = export_variants(ctx.result, ctx.project, ctx.run_dir, ctx.symptom, ctx.entry, scrubber.scrub)
    export = export_with_split(export, ENTRY, ctx.settings.replicas)  # repro.py splits the device as the trials did
    args = script_args(ctx.settings, ctx.entry)  # `tfrepro bisect train.py -- ARGS`: kept in the repro
    if args:
        export = replace(
            export, cand_files={**export.cand_files, ENTRY: comment_entry(export.cand_files[ENTRY], ENTRY, args)}
        )
    out = outdir.prepare(Path(out) if out is not None else ctx.run_dir / "report")
    try:
        writer = _Writer(out, scrubber)
        kw = dict(rerun=rerun, runner=runner, max_pairs=max_pairs, say=say)
        reproduction, export, trim, data = _with_data(ctx, export, no_data=no_data, **kw)
        with_npz, (export, npz) = export, _without_npz(export)
        artifacts = {**write_scripts(writer, ctx.result, export), **_write_data(out, ctx, npz, data, no_data)}
        loc = _localize(ctx, with_npz, localize=localize, python=python, say=say)
        artifacts.update(write_events(out / "tensorboard", load_trials(ctx.run_dir, ctx.result)))
        env_facts = _environment(reproduction, probe=probe_environment, python=python, environ=environ, say=say)
        artifacts.update(plots(out, ctx.result, ctx.symptom, reproduction))
        artifacts.update(_write_notebook(writer, ctx, export, env_facts))
        doc = _document(
            ctx,
            export,
            reproduction=reproduction,
            loc=loc,
            env_facts=env_facts,
            environ=environ,
            scrubber=scrubber,
            artifacts=artifacts,
        )
        doc["repro"].update(trimmed=trim["trimmed"], trim=trim), doc.update(data=data)
        if nightly:
            doc["nightly"] = _on_nightly(ctx, export, max_pairs=max_pairs, say=say)
        doc = scrubber.scrub_obj(doc)  # type: ignore[assignment]
        writer.write("report.json", json.dumps(doc, indent=2))
        writer.write("ISSUE.md", issue_md.render_issue(doc))
        writer.write("result.json", json.dumps(ctx.result, indent=2))
    finally:
        outdir.record(out)
    # A finding the rules did not redact fails the report, naming file:line.
    raise_on_findings(scan_bundle(out, commits=run_commits(ctx.result)), bundle=out)
    return Bundle(out, doc)


def load_context(run_dir: Path) -> Context:
    """The run's result and project; a healthy or failed run is refused."""
    from tfrepro.project import Project

    result = load_result(run_dir)
    status = result.get("status")
    if status in ("none", "error"):
        raise UserError(
            f"the run's status is {status!r}: there is no failure to report",
            path=run_dir / "result.json",
            hint="report a run whose status is 'found' (or 'baseline-fails')",
        )
    recorded = TrialSettings.from_dict(result["settings"]) if result.get("settings") else None
    project = Project.load(_entry_path(_project_root(run_dir, result), recorded))
    settings = recorded or project.manifest.trial
    return Context(
        run_dir,
        result,
        result.get("symptom") or "nan",
        project,
        settings,
        project.manifest.symptoms,
        entry_of(settings),
    )


def _entry_path(root: Path, recorded: TrialSettings | None) -> Path:
    """What to load: the script the run's trials ran (`tfrepro bisect train.py`
    with no tfrepro.toml records entry = train.py), else the project root."""
    if recorded is not None and recorded.command is None and (root / recorded.entry).is_file():
        return root / recorded.entry
    return root


def _project_root(run_dir: Path, result: dict[str, Any]) -> Path:
    """The run dir sits in <project>/.tfrepro/runs/<id>: that project is the
    one to report, even when it was moved or copied since the bisect."""
    in_project = run_dir.resolve().parent.parent
    if in_project.name == STATE_DIR_NAME or not result.get("project"):
        return in_project.parent
    return Path(result["project"])


class _Writer:
    """Writes scrubbed text into the bundle."""

    def __init__(self, out: Path, scrubber: Scrubber) -> None:
        self.out, self.scrubber = out, scrubber

    def write(self, rel: str, text: str) -> None:
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.scrubber.scrub(text), encoding="utf-8")


def _write_notebook(writer: _Writer, ctx: Context, export: Export, env: dict[str, Any]) -> dict[str, str]:
    from tfrepro.report import notebook

    head = {
        "symptom": ctx.symptom,
        "culprits": ctx.result.get("culprits") or [],
        "environment": env,
        "first_bad_commit": ctx.result.get("first_bad_commit"),
    }
    try:
        code = notebook_code(export.cand_files[ENTRY], ENTRY, script_args(ctx.settings, ctx.entry))
        nb = notebook.build(code, symptom=ctx.symptom, env=env, title=issue_md.title(head))
    except SyntaxError as e:
        return {"repro.ipynb": f"skipped: repro.py does not parse ({e.msg}, line {e.lineno})"}
    writer.write("repro.ipynb", notebook.dumps(nb))
    return {"repro.ipynb": "the repro as a notebook, exact versions pinned; upload it as a gist to link it"}


def _rerun_settings(ctx: Context) -> TrialSettings:
    command = ctx.settings.command
    return replace(
        ctx.settings,
        entry=ENTRY,
        command=tuple(ENTRY if a == ctx.entry else a for a in command) if command else None,
        # the calls the bisect timed (fit#3...): the re-run times the same ones
        timed_calls=tuple(ctx.result.get("timed_calls") or ()),
    )


def _reproduce(
    ctx: Context, export: Export, *, rerun: bool, runner: Runner | None, max_pairs: int, say: Progress
) -> Reproduction | None:
    if not rerun:
        return None
    from tfrepro.report.rerun import reproduce

    say(f"re-running {ENTRY} in a fresh process to confirm the {ctx.symptom} ...")
    rep = reproduce(
        ctx.symptom,
        export.cand_files,
        export.ref_files,
        settings=_rerun_settings(ctx),
        symptoms=ctx.symptoms,
        noise=float(ctx.result.get("noise") or 0.0),
        runner=runner,
        max_pairs=max_pairs,
        progress=say,
        expected_error=(ctx.result.get("culprit_trial") or ctx.result.get("failing") or {}).get("error"),
    )
    verdict = {True: "reproduced", False: "NOT reproduced", None: "undecided"}[rep.reproduced]
    say(f"re-run: {verdict} ({rep.detail})")
    return rep


def _reproduce_trimmed(
    ctx: Context, export: Export, *, rerun: bool, runner: Runner | None, max_pairs: int, say: Progress
) -> tuple[Reproduction | None, Export, dict[str, Any]]:
    """The trimmed repro (report/trim.py) when a re-run shows the symptom
    with it; else the untrimmed one. Returns (reproduction, export, facts)."""
    from dataclasses import replace

    from tfrepro.report.trim import trim_files

    cand, changes = trim_files(export.cand_files)
    kw = dict(rerun=rerun, runner=runner, max_pairs=max_pairs, say=say)
    if not changes:
        return _reproduce(ctx, export, **kw), export, {"trimmed": False, "changes": [], "note": "nothing to trim"}
    if not rerun:
        return (
            None,
            export,
            {
                "trimmed": False,
                "changes": changes,
                "note": "not trimmed: a trim is kept only when a re-run confirms it (--no-rerun)",
            },
        )
    trimmed = replace(export, cand_files=cand, ref_files=trim_files(export.ref_files)[0])
    say(f"trimmed {ENTRY} ({len(changes)} change{'s' if len(changes) != 1 else ''}): re-running it")
    rep = _reproduce(ctx, trimmed, **kw)
    if rep is not None and rep.reproduced is True:
        return rep, trimmed, {"trimmed": True, "changes": changes}
    say("the trimmed repro does not show the symptom: the untrimmed one is kept")
    return (
        _reproduce(ctx, export, **kw),
        export,
        {"trimmed": False, "changes": changes, "note": "the trimmed repro did not reproduce; untrimmed kept"},
    )


def _with_data(ctx: Context, export: Export, *, no_data: bool, **kw: Any):
    """The repro with synthetic stand-ins for the data files it read
    (report/standin.py) when a re-run shows the symptom with them; else the
    export as it was, and the report says which data it needs."""
    from tfrepro.report.standin import with_standins

    standin, data = with_standins(export, ctx.result, ctx.entry, no_data=no_data)
    if standin is export:
        return _reduced(ctx, export, data, no_data=no_data, **kw)
    kw["say"](f"{ENTRY} reads synthetic stand-ins for {len(data['standins'])} data file(s): re-running it")
    reproduction, got, trim = _reproduce_trimmed(ctx, standin, **kw)
    data["standin_reproduced"] = reproduction.reproduced if reproduction else None
    if reproduction is None or reproduction.reproduced is not False:
        return reproduction, got, trim, data
    kw["say"]("the stand-ins do not show the symptom: the repro keeps reading the user's data")
    data["needs_user_data"] = data["standins"] + data["needs_user_data"]
    data["note"] = "synthetic stand-ins did not reproduce the symptom; the repro reads the user's data"
    data["standins"] = []
    return _reduced(ctx, export, data, no_data=no_data, **kw)


def _write_data(out: Path, ctx: Context, npz: bytes | None, data: dict[str, Any], no_data: bool) -> dict[str, str]:
    """data.npz (the reduced records) and a NaN's replay.py + nan_state/ (its batch is user data: not with --no-data)."""
    artifacts: dict[str, str] = {}
    if npz is not None:
        (out / "data.npz").write_bytes(npz)
        red = data.get("reduction") or {}
        artifacts["data.npz"] = (
            f"{red.get('records')} of {red.get('of')} records of "
            + ", ".join(f"`{f['file']}`" for f in red.get("files") or [])
            + ": the few real records that still show the symptom"
        )
    if not no_data:
        artifacts.update(write_replay(out, ctx.run_dir, ctx.result))
    return artifacts


def _without_npz(export: Export) -> tuple[Export, bytes | None]:
    npz = export.cand_files.get("data.npz")
    if not isinstance(npz, bytes):
        return export, None
    return replace(export, cand_files={k: v for k, v in export.cand_files.items() if k != "data.npz"}), npz


def _reduced(ctx: Context, export: Export, data: dict[str, Any], *, no_data: bool, **kw: Any):
    """The repro reading the few real records that still show the symptom
    (report/reduce.py) when no stand-in does; else the export as it was."""
    from tfrepro.report.reduce import REFERENCE_KEY, reduce_export
    from tfrepro.report.standin import reads_of

    sites, batches = reads_of(ctx.result, ctx.entry)
    if no_data or not kw.get("rerun") or not data.get("needs_user_data") or not sites:
        return (*_reproduce_trimmed(ctx, export, **kw), data)
    kw["say"]("reducing the data: ddmin over the records the failing run read, each tried by a re-run")

    def shows(files: dict[str, Any]) -> bool:
        files = dict(files)
        ref = {ENTRY: files.pop(REFERENCE_KEY)} if REFERENCE_KEY in files else {}
        tried = replace(export, cand_files={**export.cand_files, **files}, ref_files={**export.ref_files, **ref})
        rep = _reproduce(ctx, tried, **kw)
        return bool(rep and rep.reproduced)

    ref_text = export.ref_files.get(ENTRY)
    got = reduce_export(Path(ctx.project.root), export.cand_files[ENTRY], sites, batches, shows, ref_text)
    data["reduction"] = {k: v for k, v in got.items() if k not in ("text", "npz", "ref_text")}
    if "error" in got:
        return (*_reproduce_trimmed(ctx, export, **kw), data)
    files = {**export.cand_files, ENTRY: got["text"], "data.npz": got["npz"]}
    # reference.py reads the same kept records as repro.py (never the user's file)
    ref_files = {**export.ref_files, ENTRY: got["ref_text"]} if got.get("ref_text") else export.ref_files
    reduced = replace(export, cand_files=files, ref_files=ref_files)
    data["needs_user_data"] = [s for s in data["needs_user_data"] if s["file"] not in {f["file"] for f in got["files"]}]
    return (_reproduce(ctx, reduced, **kw), reduced, {"trimmed": False, "changes": [], "note": "data reduced"}, data)


def _on_nightly(ctx: Context, export: Export, *, max_pairs: int, say: Progress) -> dict[str, Any]:
    from tfrepro.report.nightly import nightly_env, on_nightly

    def again(runner: Runner) -> Reproduction:
        say(f"re-running {ENTRY} on tf-nightly ...")
        return _reproduce(ctx, export, rerun=True, runner=runner, max_pairs=max_pairs, say=say)

    got = on_nightly(again, nightly_env(say))
    say(
        f"nightly: {got['version']}: "
        + {True: "reproduced", False: "NOT reproduced", None: "undecided"}[got["reproduced"]]
        + f" ({got['detail']})"
    )
    return got


def _localize(ctx: Context, export: Export, *, localize: bool, python: str | None, say: Progress) -> Any:
    if not (localize and ctx.symptom == "nan"):
        return None
    from tfrepro.report.localize import localize as run_localize

    say("localising the first non-finite value (check_numerics, XLA off) ...")
    return run_localize(export.cand_files, entry=ENTRY, python=python, timeout_s=ctx.settings.timeout_s)


def _setup_facts(export: Export, reproduction: Reproduction | None, loc: Any) -> dict[str, Any]:
    """Precision, replicas, XLA...: read from the source, then corrected by
    what the re-run and the localisation saw at run time."""
    setup = scan_setup(export.cand_files[ENTRY])
    if reproduction and reproduction.candidate:
        setup = merge_trial_setup(setup, (reproduction.candidate.get("extra") or {}).get("setup"))
    return merge_runtime(setup, loc.settings if loc else None)


def _document(
    ctx: Context,
    export: Export,
    *,
    reproduction: Reproduction | None,
    loc: Any,
    env_facts: dict[str, Any],
    environ: dict[str, str],
    scrubber: Scrubber,
    artifacts: dict[str, str],
) -> dict[str, Any]:
    """report.json: everything ISSUE.md says, as data."""
    result, project = ctx.result, ctx.project
    doc: dict[str, Any] = {
        "tfrepro_version": __version__,
        "run_id": ctx.run_dir.name,
        "run_dir": str(ctx.run_dir),
        "project": str(project.root),
        "status": result.get("status"),
        "symptom": ctx.symptom,
        "culprits": list(result.get("culprits") or []),
        "culprit_config": list(export.cand_cfg or []),
        "reference_config": list(export.ref_cfg or []),
        "first_bad_commit": result.get("first_bad_commit"),
        "commit": result.get("commit"),
        "follows": result.get("follows"),
        "nightly": _nightly(result),
        "features": {
            n: {"description": project.description(n), "affects_loss": n in project.affects_loss}
            for n in project.feature_names
        },
        "settings": ctx.settings.to_dict(),
        "symptom_settings": {
            "nan": ctx.symptoms.nan,
            "slowdown": ctx.symptoms.slowdown,
            "mismatch": ctx.symptoms.mismatch,
            "memory": ctx.symptoms.memory,
        },
        "baseline": result.get("baseline") or {},
        "failing": result.get("failing") or {},
        "culprit_trial": result.get("culprit_trial") or result.get("failing") or {},
        "evidence": {
            k: result.get(k)
            for k in (
                "trials",
                "wall_s",
                "ablation",
                "trials_table",
                "flaky",
                "reproduction_rate",
                "noise",
                "timing",
                "compile_differs",
            )
        }
        | {"replicas": ctx.settings.replicas},
        "environment": env_facts,
        "env_vars": capture_env(environ, scrubber),
        "redacted_env_count": withheld_count(environ),  # how many, never their names
        "setup": _setup_facts(export, reproduction, loc),
        "reproduction": reproduction.to_dict() if reproduction else None,
        "localization": ({**loc.to_dict(), "headline": loc.headline()} if loc else None),
        "repro": _repro_facts(ctx, export),
        "artifacts": {
            **artifacts,
            "ISSUE.md": "this issue text",
            "report.json": "everything in ISSUE.md, as data",
            "result.json": "the bisect result this report was made from",
        },
    }
    if ctx.symptom == "mismatch" and reproduction and reproduction.reference:
        doc["reference_trial"] = reproduction.reference
    return doc


def _repro_facts(ctx: Context, export: Export) -> dict[str, Any]:
    command = _rerun_settings(ctx).command
    return {
        "entry": ENTRY,
        "files": sorted(export.cand_files),
        "code": export.cand_files[ENTRY],
        "extra_imports": extra_imports(export.cand_files),
        "reference": export.ref_name,
        "diff": export.diff,
        "command": " ".join(["python", *command[1:]]) if command else f"python {ENTRY}",
    }


def _nightly(result: dict[str, Any]) -> dict[str, Any] | None:
    """Whether a nightly build was tried: a `nightly` record of the run
    ({"version", "reproduced"}), or a nightly among a version bisect's trials."""
    if isinstance(result.get("nightly"), dict):
        return result["nightly"]
    for row in result.get("version_trials") or []:
        version = str(row.get("version") or "")
        if "dev" in version or "nightly" in version:
            return {"version": version, "reproduced": row.get("verdict") == result.get("symptom")}
    return None


def _environment(
    reproduction: Reproduction | None, *, probe: bool, python: str | None, environ: Mapping[str, str], say: Progress
) -> dict[str, Any]:
    """The re-run's process described itself; otherwise a child of its own.
    The library path the CUDA libraries load from comes from `environ`."""
    facts = ((reproduction.candidate or {}).get("extra") or {}).get("environment") if reproduction else None
    if facts and "probe_error" not in facts:
        facts = {**facts, "collected_in": "the re-run of repro.py"}
    elif not probe:
        facts = {"probe_error": "environment probe not run"}
    else:
        from tfrepro.report import environment

        say("describing the environment (versions, devices) in a TensorFlow child ...")
        facts = environment.collect(python=python)
    if environ.get("LD_LIBRARY_PATH"):
        facts = {**facts, "ld_library_path": environ["LD_LIBRARY_PATH"]}
    return facts
