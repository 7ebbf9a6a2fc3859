"""`tfrepro bisect` (features, commits, TensorFlow releases) and `tfrepro demo`.

Progress goes to stderr as trials run, the answer to stdout (exactly one JSON
object with --json, in every mode); the result carries the exit code
(Contract 4) and the run dir. The range modes' work is `bisect/commits.py`
and `bisect/versions.py`, imported only when a range is bisected.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tfrepro.cli.app import (
    cold_option,
    load_project,
    main,
    parse_names,
    path_argument,
    replicas_option,
    script_args_argument,
    select_options,
)
from tfrepro.errors import UserError
from tfrepro.verdicts import SYMPTOM_ORDER

if TYPE_CHECKING:
    from tfrepro.trials.values import RunResult

_WHY = {
    "feature": "--keras and --tf-dist belong to version mode (--tf-versions)",
    "commit": "commit mode runs each commit once, as written (every feature as in the file)",
    "version": "version mode runs the project as written, one release at a time, on this machine",
}


@main.command("bisect")
@cold_option
@path_argument
@script_args_argument
@click.option(
    "--symptom",
    type=click.Choice([v.value for v in SYMPTOM_ORDER]),
    help="The symptom to hunt (default: the first the failing configuration shows, in this order).",
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "ablation", "ddmin"]),
    default="auto",
    show_default=True,
    help="ablation: each feature alone first; ddmin: delta debugging from every feature on.",
)
@click.option("--steps", type=click.IntRange(min=1), help="Training steps per trial (default: [trial] steps).")
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0.1, max=7 * 24 * 3600.0),
    metavar="SECONDS",
    help="Without --steps the failing configuration runs until its symptom: at most this many seconds "
    "of training (default: [trial] budget_s, 60).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    help="Runs per configuration; a configuration fails when any run does (default: [trial] repeats).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Trials run in parallel (never for slowdown: timing trials run one at a time).",
)
@click.option("--no-cache", is_flag=True, help="Run every trial again, even if cached.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object (the result) on stdout.")
@click.option("--good", metavar="REV", help="Commit mode: a commit without the symptom (version mode: a release).")
@click.option("--bad", metavar="REV", help="Commit mode: a commit with the symptom (version mode: a release).")
@click.option(
    "--tf-versions",
    metavar="A,B,...|A..B",
    help="Version mode: TensorFlow releases to bisect; A..B means every final release in between.",
)
@click.option(
    "--keras",
    "keras_mode",
    type=click.Choice(["default", "legacy"]),
    default="default",
    show_default=True,
    help="Version mode: legacy runs tf.keras as tf_keras (TF_USE_LEGACY_KERAS=1).",
)
@click.option(
    "--tf-dist",
    type=click.Choice(["tensorflow", "tensorflow-cpu"]),
    help="Version mode: the distribution to install (default: the one installed here).",
)
@click.option(
    "--then-features", is_flag=True, help="Version mode: then bisect the features inside the first bad release."
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where trials run: this machine (--jobs at a time) or a Ray cluster (one task per trial; "
    "needs pip install 'tfrepro[ray]').",
)
@click.option(
    "--address",
    metavar="ADDR",
    help="With --executor ray: the cluster to join (e.g. 10.0.0.5:6379); default: a local Ray instance.",
)
@click.option(
    "--replays",
    type=click.IntRange(min=1),
    metavar="N",
    help="Fresh runs of the answer at the end (default 3); for a slowdown, fresh timing pairs "
    "added to the evidence (default 1).",
)
@click.option(
    "--timing-budget",
    type=click.FloatRange(min=0.01),
    metavar="SECONDS",
    help="Steady-state seconds each timing trial measures (default 1.0, and at least 30 steps).",
)
@replicas_option
@select_options
def bisect_cmd(
    path: Path,
    symptom: str | None,
    strategy: str,
    steps: int | None,
    budget_s: float | None,
    repeats: int | None,
    jobs: int,
    no_cache: bool,
    as_json: bool,
    good: str | None,
    bad: str | None,
    executor: str,
    address: str | None,
    tf_versions: str | None,
    keras_mode: str,
    tf_dist: str | None,
    then_features: bool,
    replays: int | None,
    timing_budget: float | None,
    replicas: int | None,
    only: str | None,
    skip: str | None,
) -> None:
    """Find the feature, or smallest set of interacting features, behind a symptom.

    Runs the baseline (every feature OFF) and the failing configuration
    (every feature ON), picks the symptom the failing one shows, searches for
    a minimal set of culprits, and replays the answer: a failure that does
    not reproduce every time is reported as flaky, never blamed on a
    feature. The run is kept in .tfrepro/runs/<id>/ (result.json, every
    trial's summary and logs). Interrupted? Run the same command again:
    finished trials come from the cache.

    With --good REV --bad REV: the first commit whose trial shows the symptom.
    Each tried commit runs as written, copied out of git under .tfrepro/
    (your working tree, index, branch and stash are never touched); the good
    commit is the reference; a commit that fails otherwise (syntax error,
    another crash) is skipped, and skips that hide the answer list the
    candidate commits (ambiguous). With --jobs J, J commits of a round are
    tried at once (k-ary bisection).

    Exit codes: 0 found, 1 the baseline (good end) fails or an error, 2 bad
    input, 3 none (measured: the failing configuration or bad end is healthy),
    4 flaky or ambiguous, 5 untestable (no training step ran, or nothing
    could be timed: the reason says how to fix it), 130 interrupted.

    The script's own arguments go after `--`: `tfrepro bisect train.py --
    --epochs 3` runs every trial as `python train.py --epochs 3`.

    With --tf-versions A,B,... (or A..B): the first TensorFlow release whose
    trial shows the symptom, each release in its own environment (built once,
    kept in the user cache: see `tfrepro envs`); the oldest release is the
    reference unless --good/--bad say otherwise; a release that cannot be
    installed is skipped. --then-features then bisects the features inside
    the first bad release ("2.16.1 broke it, and only with mixed_precision").
    """
    mode = (
        ("version+features" if then_features else "version")
        if tf_versions
        else ("commit" if good or bad else "feature")
    )
    # Each option: whether it was given, and the modes that use it; any other
    # given is refused (exit 2), never silently ignored. --then-features
    # continues in feature mode: --only/--skip choose its features.
    version, feature = ("version", "version+features"), ("feature",)
    asked = {
        "--then-features": (then_features, version),
        "--replays": (replays is not None, feature),
        "--timing-budget": (timing_budget is not None, ("feature", "commit", *version)),
        "--strategy": (strategy != "auto", feature),
        "--repeats": (repeats is not None, feature),
        "--jobs": (jobs != 1, ("feature", "commit")),
        "--executor ray": (executor != "local", ("feature", "commit")),
        "--only": (only is not None, ("feature", "version+features")),
        "--skip": (skip is not None, ("feature", "version+features")),
        "--keras legacy": (keras_mode != "default", version),
        "--tf-dist": (tf_dist is not None, version),
        "--address (without --executor ray)": (address is not None and executor != "ray", ()),
        "--replicas": (replicas is not None, feature),
    }
    if ignored := [name for name, (on, modes) in asked.items() if on and mode not in modes]:
        base = mode.split("+")[0]  # version+features: version mode's reason
        raise UserError(f"{base} mode does not use {', '.join(ignored)}", hint=f"{_WHY[base]}; drop the option")
    from tfrepro.bisect.events import BisectOptions, parse_symptom

    given = {"replays": replays, "timing_replays": replays, "timing_budget_s": timing_budget}
    options = BisectOptions(
        symptom=parse_symptom(symptom),
        strategy=strategy,
        steps=steps,
        budget_s=budget_s,
        repeats=repeats,
        jobs=jobs,
        use_cache=not no_cache,
        executor=executor,
        address=address,
        replicas=replicas,
        **{k: v for k, v in given.items() if v is not None},  # else BisectOptions' defaults
    )
    # --json: stdout is the one result object, in every mode; whatever else
    # writes there meanwhile (Ray's driver prints a raylet's death notice) goes to stderr.
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        if tf_versions:
            from packaging.version import InvalidVersion, Version

            from tfrepro.bisect.events import ProgressLines
            from tfrepro.bisect.versions import Releases, bisect_versions, feature_hook
            from tfrepro.trials.envs import cache_root, detect_tf_dist
            from tfrepro.trials.releases import expand, list_releases

            for option, rev in (("--good", good), ("--bad", bad)):  # releases, not commits
                try:
                    if rev is not None:
                        Version(rev)
                except InvalidVersion:
                    raise UserError(
                        f"{option} {rev} is not a TensorFlow release",
                        hint="with --tf-versions, --good/--bad are releases (e.g. 2.15.1); for commits drop --tf-versions",
                    ) from None
            dist = tf_dist or detect_tf_dist()
            notes: list[str] = []

            def listing():  # the index is asked only for ranges
                got = list_releases(dist, cache_root())
                if got.stale:
                    notes.append(f"the package index is unreachable: using the {dist} release list cached earlier")
                return got

            versions, excluded = expand(tf_versions, listing)
            for n in notes:
                click.echo(f"note: {n}", err=True)
            progress = None if as_json else ProgressLines(click.echo, 14)
            names = (parse_names(only) or None, parse_names(skip) or None)  # --then-features' features
            hook = feature_hook(options, *names, progress) if then_features else None
            releases = Releases(good, bad, keras_mode == "legacy", dist, tuple(excluded), hook)
            on_line = None if as_json else (lambda line: click.echo(f"  {line}", err=True))
            result = bisect_versions(path, versions, options, releases, events=progress, on_line=on_line)
            doc = result.to_dict()
            doc["notes"] = [*notes, *doc.get("notes", [])]
            answer = json.dumps(doc) if as_json else range_answer(result, doc["notes"])
        elif good or bad:
            if not good or not bad:
                raise UserError(
                    "commit mode needs both --good REV and --bad REV", hint="e.g. tfrepro bisect --good v1.2 --bad HEAD"
                )
            from tfrepro.bisect.commits import bisect_commits
            from tfrepro.bisect.events import ProgressLines
            from tfrepro.trials.executors import make_executor

            runs_on = make_executor(executor, jobs=jobs, address=address, log=lambda text: click.echo(text, err=True))
            try:  # the tried commits are printed as they go
                events = None if as_json else ProgressLines(click.echo, 12)
                result = bisect_commits(path, good, bad, options, events=events, executor=runs_on)
            finally:
                runs_on.close()
            answer = json.dumps(result.to_dict()) if as_json else range_answer(result)
        else:
            from tfrepro.check.run import checks_for_result
            from tfrepro.cli.display import answer_lines, run_bisect
            from tfrepro.trials.state import prune_after_run

            project = load_project(path, only, skip)
            result = run_bisect(project, replace(options, baseline_checks=checks_for_result), as_json=as_json)
            prune_after_run(project)
            answer = json.dumps(result.to_dict()) if as_json else "\n".join(answer_lines(result))
    click.echo(answer)
    from tfrepro.report.tables import write_trial_tables

    # trials.csv and the TensorBoard HParams view of the run just finished, in
    # its own run dir in every mode (best effort: a failure is a warning)
    try:
        written = write_trial_tables(Path(result.run_dir))  # type: ignore[arg-type]  (every answer has its run dir)
    except Exception as e:  # noqa: BLE001  (the answer is already out; the tables are extras)
        click.echo(f"warning: trials.csv not written: {type(e).__name__}: {e}", err=True)
        written = None
    if written:
        click.echo(
            f"trials: {written['trials.csv']}; `tensorboard --logdir {written['tensorboard']}` "
            "(HParams tab: features against verdicts)",
            err=True,
        )
    sys.exit(result.exit_code)


@main.command("demo")
@cold_option
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=2, show_default=True, help="Trials run in parallel.")
@click.option("--keep", is_flag=True, help="Keep the temporary copy of the example (its path is printed).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the bisect result as one JSON object (with demo_dir, expected, found_planted).",
)
def demo_cmd(jobs: int, keep: bool, as_json: bool) -> None:
    """The whole loop on a bundled example with a planted bug.

    Copies the example project to a temporary directory, bisects it with
    live progress and prints the answer. Exit code 0 when the planted
    culprit is found, the bisect's own code (Contract 4) when it ends
    otherwise, 1 when it names another culprit. Next step on a real project:
    `tfrepro report`.
    """
    import shutil
    import tempfile

    from tfrepro.bisect.engine import BisectOptions
    from tfrepro.cli.display import answer_lines, run_bisect
    from tfrepro.project import Project

    src = Path(__file__).resolve().parent.parent / "examples" / "demo"
    expected = json.loads((src / "expected.json").read_text(encoding="utf-8"))
    tmp = Path(tempfile.mkdtemp(prefix="tfrepro-demo-"))
    try:
        dest = tmp / "demo"
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".tfrepro", "__pycache__", "expected.json"))
        click.echo(f"demo project copied to {dest}", err=as_json)
        click.echo(f"planted bug: {expected.get('note', '')}", err=True)
        result = run_bisect(Project.load(dest), BisectOptions(jobs=jobs), as_json=as_json)
        doc = result.to_dict()
        right = doc["status"] == expected["status"] and doc["culprits"] == expected["culprits"]
        if as_json:
            doc.update(demo_dir=str(dest) if keep else None, expected=expected, found_planted=right)
            click.echo(json.dumps(doc))
        else:
            click.echo("\n".join(answer_lines(result)))
            if right:
                click.echo(f"the planted culprit was found: {', '.join(expected['culprits'])}")
            else:
                click.echo(
                    f"expected {expected['symptom']}: {', '.join(expected['culprits'])}, got {doc['status']}", err=True
                )
            if keep:
                click.echo(f"kept: {dest}; try `tfrepro report {dest}`")
        sys.exit(0 if right else (result.exit_code or 1))
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def range_answer(result: RunResult, notes: list[str] | None = None) -> str:
    """A range bisection in words: the first bad commit (`notes` None: commit
    mode; its tried commits are printed as they go) or
    release (then one line per release and the `notes`), the candidates when
    ambiguous, else the status and why; then the cost: trials, cache hits,
    wall time, run dir."""
    from tfrepro.bisect.commits import CommitFields
    from tfrepro.bisect.ranges import RangeEvidence
    from tfrepro.bisect.versions import VersionFields

    ev = result.evidence if isinstance(result.evidence, RangeEvidence) else None
    status, symptom = result.status.value, result.symptom.value if result.symptom is not None else None
    rows: list[str] = []
    if notes is None:
        c = ev.mode.commit if ev is not None and isinstance(ev.mode, CommitFields) else None
        found = (
            None
            if c is None
            else [f"first bad commit ({symptom}): {c.sha}", f"  {c.subject}", f"  {c.author}, {c.date}"]
        )
        ambiguous = [f"{symptom}: the first bad commit is one of:"]
        ambiguous += [f"  {d['sha'][:12]}  {d['subject']}" for d in result.candidates]
    else:
        mode = ev.mode if ev is not None and isinstance(ev.mode, VersionFields) else None
        found = [f"first bad version ({symptom}): {result.first_bad_version}  (last good: {result.last_good_version})"]
        then = mode.then_features if mode is not None else None
        if then:
            inside = (
                f"and only with {' + '.join(then['culprits'])} on"
                if then.get("culprits")
                else f"feature bisect inside it: {then.get('status')}"
            )
            found.append(f"  {inside} (run: {then.get('run_dir')})")
        if mode is not None and mode.follows_note:
            found.append(f"  follows {mode.follows}: {mode.follows_note}")
        ambiguous = [f"{symptom}: the first bad version is one of {', '.join(result.candidates)}"]
        for row in mode.versions if mode is not None else ():
            what = row.verdict if row.verdict in ("ok", "not tried", "untestable", "excluded") else "BAD"
            shows = f" [{', '.join(row.shows)}]" if row.shows else ""
            keras = f"  keras {row.keras}" + (" (tf_keras)" if row.keras_lib == "tf_keras" else "") if row.keras else ""
            note = f"  {row.note}" if row.note else ""
            rows.append(f"  {row.version:<14} {what:<10}{shows}{keras}{note}")
        rows += [f"note: {n}" for n in notes]
    if status == "found" and found is not None:
        head = found
    else:
        head = ambiguous if status == "ambiguous" else [f"{status}: {ev.message if ev and ev.message else ''}"]
    cached = f", {ev.cached_trials} from cache" if ev is not None and ev.cached_trials else ""
    return "\n".join([*head, *rows, f"{result.trials} trials{cached}, {result.wall_s:.1f} s; run: {result.run_dir}"])
