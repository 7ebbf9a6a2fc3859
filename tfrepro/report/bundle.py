"""`tfrepro report`: a bisect run directory in, a bug-report bundle out.

The bundle (default `<run>/report/`):

    repro.py         the minimal failing variant, exported (Contract 1)
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

import difflib
import importlib.util
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tfrepro import __version__
from tfrepro.bisect.results import TrialSettings
from tfrepro.errors import TfreproError, UserError
from tfrepro.report import issue as issue_md
from tfrepro.report.rerun import Reproduction, Runner
from tfrepro.report.scan import extra_imports, merge_runtime, merge_trial_setup, scan_setup
from tfrepro.report.scrub import Scrubber, capture_env, withheld_count

RUNS = Path(".tfrepro") / "runs"
ENTRY = "repro.py"
REFERENCE = "reference.py"


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
            found = sorted((d for d in runs.iterdir() if (d / "result.json").is_file()),
                           key=lambda d: (d.stat().st_mtime, d.name))
            if found:
                return found[-1]
    if not p.exists():
        raise UserError("no such run or project directory", path=p,
                        hint="give a run directory (.tfrepro/runs/<id>) or the project that holds it")
    raise UserError(f"no bisect run found in {p}", path=p,
                    hint="run `tfrepro bisect` first; its runs are kept under .tfrepro/runs/")


def load_result(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "result.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read the run's result: {e}", path=path) from None
    if not isinstance(result, dict) or "status" not in result:
        raise UserError("not a tfrepro bisect result (no `status`)", path=path)
    return result


# --------------------------------------------------------------------------- export


def _entry_of(settings: TrialSettings) -> str:
    if settings.command is None:
        return settings.entry
    return next((a for a in settings.command if a.endswith(".py")), settings.entry)


def bundle_files(project: Any, enabled: list[str] | None, entry: str) -> dict[str, str]:
    """The variant as standalone files: every .py file of the project, marked
    ones exported (markers and inactive parts gone), the entry renamed to
    repro.py. Data files are not carried: a repro uses synthetic data."""
    exported = project.export(enabled)
    files: dict[str, str] = {}
    for rel in project.files:
        if not rel.endswith(".py"):
            continue
        text = exported.get(rel)
        if text is None:
            text = (project.root / rel).read_text(encoding="utf-8")
        files[ENTRY if rel == entry else rel] = text
    if ENTRY not in files:
        raise TfreproError(f"the trial entry {entry!r} is not a Python file of the project")
    return files


def unified_diff(ref: Mapping[str, str], cand: Mapping[str, str]) -> str:
    chunks = []
    for rel in sorted(set(ref) | set(cand)):
        a, b = ref.get(rel, ""), cand.get(rel, "")
        if a == b:
            continue
        from_name = REFERENCE if rel == ENTRY else f"reference/{rel}"
        chunks.extend(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                           fromfile=from_name, tofile=rel))
    return "".join(chunks)


def _reference_config(result: dict[str, Any], symptom: str) -> list[str]:
    culprit_config = list(result.get("culprit_config") or result.get("culprits") or [])
    culprits = set(result.get("culprits") or [])
    if symptom == "mismatch":
        # The reference of a configuration: only its affects_loss features on (Contract 3).
        affects = set(result.get("affects_loss") or [])
        return sorted(set(culprit_config) & affects)
    return sorted(set(culprit_config) - culprits)


# --------------------------------------------------------------------------- the report


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
) -> Bundle:
    """Write the bundle for the run in `run_dir` and return it. `runner`
    replaces the real trial runner (tests); `environ` the process environment
    the report describes and scrubs against; `probe_environment=False` skips
    the TensorFlow child describing versions and devices when no re-run did."""
    from tfrepro.project import Project

    environ = dict(os.environ if environ is None else environ)
    scrubber = Scrubber.from_environ(environ)
    run_dir = Path(run_dir)
    result = load_result(run_dir)
    status = result.get("status")
    if status in ("none", "error"):
        raise UserError(
            f"the run's status is {status!r}: there is no failure to report", path=run_dir / "result.json",
            hint="report a run whose status is 'found' (or 'baseline-fails')",
        )
    symptom = result.get("symptom") or "nan"
    # The run dir sits in <project>/.tfrepro/runs/<id>: that project is the one
    # to report, even when it was moved or copied since the bisect recorded it.
    in_project = run_dir.resolve().parent.parent
    if in_project.name == ".tfrepro" or not result.get("project"):
        project_root = in_project.parent
    else:
        project_root = Path(result["project"])
    project = Project.load(project_root)
    settings = TrialSettings.from_dict(result.get("settings") or {}) if result.get("settings") else project.manifest.trial
    symptoms = project.manifest.symptoms
    entry = _entry_of(settings)

    commit_mode = bool(result.get("first_bad_commit"))
    cand_cfg, ref_cfg, cand_files, ref_files = _variants(result, project, run_dir, symptom, entry)
    cand_files = {k: scrubber.scrub(v) for k, v in cand_files.items()}
    ref_files = {k: scrubber.scrub(v) for k, v in ref_files.items()}
    diff = unified_diff(ref_files, cand_files)

    out = _prepare_out(Path(out) if out is not None else run_dir / "report")
    artifacts: dict[str, str] = {}

    def write(rel: str, text: str) -> None:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(scrubber.scrub(text), encoding="utf-8")

    for rel, text in cand_files.items():
        write(rel, text)
    artifacts[ENTRY] = (
        f"the script at the first bad commit {str(result.get('first_bad_commit'))[:12]}; run `python {ENTRY}`"
        if commit_mode else f"the minimal failing script ({_cfg_words(cand_cfg)}); run `python {ENTRY}`")
    single = set(ref_files) == {ENTRY}
    if single:
        write(REFERENCE, ref_files[ENTRY])
        ref_name = REFERENCE
    else:
        for rel, text in ref_files.items():
            write(f"reference/{rel}", text)
        ref_name = f"reference/{ENTRY}"
    artifacts[ref_name] = (
        f"the script at the good commit {str((result.get('good') or {}).get('sha', ''))[:12]}, for comparison"
        if commit_mode else f"the same script without the culprits ({_cfg_words(ref_cfg)}), for comparison")

    rerun_settings = replace(
        settings, entry=ENTRY,
        command=tuple(ENTRY if a == entry else a for a in settings.command) if settings.command else None,
    )
    reproduction: Reproduction | None = None
    if rerun:
        from tfrepro.report.rerun import reproduce

        reproduction = reproduce(symptom, cand_files, ref_files, settings=rerun_settings, symptoms=symptoms,
                                 noise=float(result.get("noise") or 0.0), runner=runner, max_pairs=max_pairs)

    loc = None
    if localize and symptom == "nan":
        from tfrepro.report.localize import localize as run_localize

        loc = run_localize(cand_files, entry=ENTRY, python=python, timeout_s=settings.timeout_s)

    setup = scan_setup(cand_files[ENTRY])
    if reproduction and reproduction.candidate:
        setup = merge_trial_setup(setup, (reproduction.candidate.get("extra") or {}).get("setup"))
    setup = merge_runtime(setup, loc.settings if loc else None)

    trials = _load_trials(run_dir, result)
    artifacts.update(_write_events(out / "tensorboard", trials))

    env_facts = _environment(reproduction, probe=probe_environment, python=python)

    artifacts.update(_plots(out, result, symptom, reproduction))

    doc: dict[str, Any] = {
        "tfrepro_version": __version__,
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "project": str(project_root),
        "status": status,
        "symptom": symptom,
        "culprits": list(result.get("culprits") or []),
        "culprit_config": list(cand_cfg or []),
        "reference_config": list(ref_cfg or []),
        "first_bad_commit": result.get("first_bad_commit"),
        "commit": result.get("commit"),
        "features": {n: {"description": project.description(n), "affects_loss": n in project.affects_loss}
                     for n in project.feature_names},
        "settings": settings.to_dict(),
        "symptom_settings": {"nan": symptoms.nan, "slowdown": symptoms.slowdown, "mismatch": symptoms.mismatch},
        "baseline": result.get("baseline") or {},
        "failing": result.get("failing") or {},
        "culprit_trial": result.get("culprit_trial") or result.get("failing") or {},
        "evidence": {k: result.get(k) for k in ("trials", "wall_s", "ablation", "trials_table", "flaky",
                                                 "reproduction_rate", "noise", "timing")},
        "environment": env_facts,
        "env_vars": capture_env(environ, scrubber),
        "redacted_env_count": withheld_count(environ),  # how many, never their names
        "setup": setup,
        "reproduction": reproduction.to_dict() if reproduction else None,
        "localization": ({**loc.to_dict(), "headline": loc.headline()} if loc else None),
        "repro": {"entry": ENTRY, "files": sorted(cand_files), "code": cand_files[ENTRY],
                  "extra_imports": extra_imports(cand_files),
                  "reference": ref_name, "diff": diff,
                  "command": " ".join(["python", *rerun_settings.command[1:]]) if rerun_settings.command
                  else f"python {ENTRY}"},
        "artifacts": artifacts,
    }
    if symptom == "mismatch" and reproduction and reproduction.reference:
        doc["reference_trial"] = reproduction.reference
    artifacts["ISSUE.md"] = "this issue text"
    artifacts["report.json"] = "everything in ISSUE.md, as data"
    artifacts["result.json"] = "the bisect result this report was made from"
    doc = scrubber.scrub_obj(doc)  # type: ignore[assignment]
    write("report.json", json.dumps(doc, indent=2))
    write("ISSUE.md", issue_md.render_issue(doc))
    write("result.json", json.dumps(result, indent=2))
    return Bundle(out, doc)


def _variants(
    result: dict[str, Any], project: Any, run_dir: Path, symptom: str, entry: str
) -> tuple[list[str] | None, list[str] | None, dict[str, str], dict[str, str]]:
    """(culprit config, reference config, their exported files). A config of
    None means "as written": commit bisection keeps both ends' projects in
    the run directory, and the good end is the reference."""
    from tfrepro.project import Project

    if result.get("first_bad_commit"):
        bad_dir, good_dir = result.get("first_bad_project"), result.get("good_project")
        if not (bad_dir and good_dir and Path(bad_dir).is_dir() and Path(good_dir).is_dir()):
            raise TfreproError(f"the run {run_dir} lacks the first bad commit's project; bisect again")
        return (None, None, bundle_files(Project.load(bad_dir), None, entry),
                bundle_files(Project.load(good_dir), None, entry))
    if result.get("status") == "baseline-fails":
        cand_cfg: list[str] = []
        ref_cfg: list[str] = []
    else:
        cand_cfg = sorted(result.get("culprit_config") or result.get("culprits") or [])
        ref_cfg = _reference_config(result, symptom)
    return cand_cfg, ref_cfg, bundle_files(project, cand_cfg, entry), bundle_files(project, ref_cfg, entry)


def _prepare_out(out: Path) -> Path:
    """The bundle directory, emptied if it holds an earlier bundle; any other
    non-empty directory is refused (never delete what we did not write)."""
    out = out.resolve()
    if out.exists() and any(out.iterdir()):
        if not (out / "ISSUE.md").is_file() or not (out / "report.json").is_file():
            raise UserError("the output directory exists and is not a tfrepro bundle", path=out,
                            hint="give --out a new or empty directory")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _environment(reproduction: Reproduction | None, *, probe: bool, python: str | None) -> dict[str, Any]:
    """The re-run's process described itself; otherwise a child of its own."""
    facts = ((reproduction.candidate or {}).get("extra") or {}).get("environment") if reproduction else None
    if facts and "probe_error" not in facts:
        return {**facts, "collected_in": "the re-run of repro.py"}
    if not probe:
        return {"probe_error": "environment probe not run"}
    from tfrepro.report import environment

    return environment.collect(python=python)


def _cfg_words(cfg: list[str] | None) -> str:
    if cfg is None:
        return "the project as written"
    return "features on: " + ", ".join(cfg) if cfg else "every feature off"


def _load_trials(run_dir: Path, result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, summary) of every trial of the run, in order; the baseline,
    failing and culprit summaries when the table has none."""
    trials = []
    for i, row in enumerate(result.get("trials_table") or [], 1):
        summary = None
        if row.get("summary"):
            try:
                summary = json.loads((run_dir / row["summary"]).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                summary = None
        if summary is None:
            continue
        label = "+".join(row.get("enabled") or []) or "baseline"
        role = f"_{row['role']}{row.get('repeat', '')}" if row.get("role") else ""
        trials.append((f"{i:02d}_{label}{role}_{row.get('verdict', '')}"[:120], summary))
    if not trials:
        for key in ("baseline", "failing", "culprit_trial"):
            if result.get(key):
                trials.append((key, result[key]))
    return trials


def _write_events(logdir: Path, trials: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """One TensorBoard run per trial (pure-Python event files: neither
    TensorFlow nor tensorboard is needed to write them)."""
    from tfrepro.report import events

    if not trials:
        return {"tensorboard/": "skipped: the run kept no per-trial summaries"}
    for name, s in trials:
        events.write_run(logdir / _safe_name(name), {
            "loss": s.get("losses") or [],
            "step_time_ms": [1000.0 * t for t in s.get("step_times") or []],
        })
    have_tb = importlib.util.find_spec("tensorboard") is not None
    view = ("view them with `tensorboard --logdir tensorboard`" if have_tb else
            "viewing skipped: tensorboard not installed here (`pip install tensorboard`, "
            "then `tensorboard --logdir tensorboard`)")
    return {"tensorboard/": f"{len(trials)} runs, one per trial (scalars loss, step_time_ms); {view}"}


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in name)[:120]


def _plots(out: Path, result: dict[str, Any], symptom: str, rep: Reproduction | None) -> dict[str, str]:
    from tfrepro.report import plots

    notes: dict[str, str] = {}
    base = result.get("baseline") or {}
    cand = result.get("culprit_trial") or result.get("failing") or {}
    label = "+".join(result.get("culprit_config") or result.get("culprits") or []) or "failing"
    curves = [("baseline (all features off)", base), (f"culprit configuration ({label})", cand)]
    if symptom == "mismatch" and rep and rep.reference:
        curves.insert(1, ("reference (re-run of reference.py)", rep.reference))
    if plots.loss_plot(out / "loss.png", curves, title=f"per-step loss — {symptom}"):
        notes["loss.png"] = "per-step loss, baseline against the culprit configuration" + (
            ", first non-finite step marked" if symptom == "nan" else "")
    else:
        notes["loss.png"] = "skipped: no per-step loss recorded"
    if symptom == "slowdown":
        # Every steady step of one trial each shows the spread; the per-trial
        # medians of the interleaved timing runs are what the test compared.
        groups = [("baseline", plots.steady(base)), (label, plots.steady(cand))]
        timing = result.get("timing") or {}
        if not (groups[0][1] and groups[1][1]) and timing.get("baseline") and timing.get("candidate"):
            groups = [("baseline (per-trial medians)", timing["baseline"]),
                      (f"{label} (per-trial medians)", timing["candidate"])]
        if plots.step_time_plot(out / "steps.png", groups, title="steady-state step time (warm-up excluded)"):
            notes["steps.png"] = "step-time distributions, baseline against the culprit configuration"
        else:
            notes["steps.png"] = "skipped: no step times recorded"
    return notes
