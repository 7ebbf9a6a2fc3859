"""`tfrepro bisect` (features, commits, TensorFlow releases) and `tfrepro demo`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tfrepro.cli.app import load_project, main, path_argument, select_options
from tfrepro.errors import UserError

_SYMPTOMS = ["nan", "crash", "timeout", "memory", "mismatch", "slowdown"]


@main.command("bisect")
@path_argument
@click.option("--symptom", type=click.Choice(_SYMPTOMS),
              help="The symptom to hunt (default: the first the failing configuration shows, in this order).")
@click.option("--strategy", type=click.Choice(["auto", "ablation", "ddmin"]), default="auto", show_default=True,
              help="ablation: each feature alone first; ddmin: delta debugging from every feature on.")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps per trial (default: [trial] steps).")
@click.option("--repeats", type=click.IntRange(min=1),
              help="Runs per configuration; a configuration fails when any run does (default: [trial] repeats).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trials run in parallel (never for slowdown: timing trials run one at a time).")
@click.option("--no-cache", is_flag=True, help="Run every trial again, even if cached.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object (the result) on stdout.")
@click.option("--good", metavar="REV", help="Commit mode: a commit without the symptom (version mode: a release).")
@click.option("--bad", metavar="REV", help="Commit mode: a commit with the symptom (version mode: a release).")
@click.option("--tf-versions", metavar="A,B,...|A..B",
              help="Version mode: TensorFlow releases to bisect; A..B means every final release in between.")
@click.option("--keras", "keras_mode", type=click.Choice(["default", "legacy"]), default="default",
              show_default=True, help="Version mode: legacy runs tf.keras as tf_keras (TF_USE_LEGACY_KERAS=1).")
@click.option("--tf-dist", type=click.Choice(["tensorflow", "tensorflow-cpu"]),
              help="Version mode: the distribution to install (default: the one installed here).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where trials run: this machine (--jobs at a time) or a Ray cluster (one task per trial; "
                   "needs pip install 'tfrepro[ray]').")
@click.option("--address", metavar="ADDR",
              help="With --executor ray: the cluster to join (e.g. 10.0.0.5:6379); default: a local Ray instance.")
@select_options
def bisect_cmd(path: Path, symptom: str | None, strategy: str, steps: int | None, repeats: int | None,
               jobs: int, no_cache: bool, as_json: bool, good: str | None, bad: str | None,
               executor: str, address: str | None, tf_versions: str | None, keras_mode: str,
               tf_dist: str | None, only: str | None, skip: str | None) -> None:
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
    input, 3 none (the failing configuration or bad end is healthy), 4 flaky
    or ambiguous, 130 interrupted.

    With --tf-versions A,B,... (or A..B): the first TensorFlow release whose
    trial shows the symptom, each release in its own environment (built once,
    kept in the user cache: see `tfrepro envs`); the oldest release is the
    reference unless --good/--bad say otherwise; a release that cannot be
    installed is skipped.
    """
    if tf_versions:
        from tfrepro.bisect.versions_cli import run_from_cli as run_versions

        sys.exit(run_versions(path, tf_versions, good=good, bad=bad, symptom=symptom, keras=keras_mode,
                              tf_dist=tf_dist, as_json=as_json, steps=steps, use_cache=not no_cache))
    if good or bad:
        from tfrepro.bisect.commits_cli import run_from_cli

        ignored = [name for name, given in (("--repeats", repeats is not None), ("--strategy", strategy != "auto"))
                   if given]
        if ignored:
            raise UserError(f"commit mode does not use {' or '.join(ignored)}",
                            hint="commit mode runs each commit once as written; drop the option")
        sys.exit(run_from_cli(path, good, bad, symptom=symptom, as_json=as_json, steps=steps,
                              use_cache=not no_cache, executor=executor, address=address, jobs=jobs))
    from tfrepro.bisect.display import answer_lines, run_bisect
    from tfrepro.bisect.engine import BisectOptions
    from tfrepro.check.run import checks_for_result
    from tfrepro.trials.state import prune_after_run
    from tfrepro.trials.values import Status, Verdict

    project = load_project(path, only, skip)
    options = BisectOptions(symptom=Verdict(symptom) if symptom else None, strategy=strategy, steps=steps,
                            repeats=repeats, jobs=jobs, use_cache=not no_cache, executor=executor,
                            address=address, baseline_checks=checks_for_result)
    doc = run_bisect(project, options, as_json=as_json)
    prune_after_run(project)
    click.echo(json.dumps(doc) if as_json else "\n".join(answer_lines(doc)))
    sys.exit(Status(doc["status"]).exit_code)


@main.command("demo")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=2, show_default=True,
              help="Trials run in parallel.")
@click.option("--keep", is_flag=True, help="Keep the temporary copy of the example (its path is printed).")
def demo_cmd(jobs: int, keep: bool) -> None:
    """The whole loop on a bundled example with a planted bug.

    Copies the example project to a temporary directory, bisects it with
    live progress and prints the answer. Exit code 0 when the planted
    culprit is found. Next step on a real project: `tfrepro report`.
    """
    import shutil
    import tempfile

    from tfrepro.bisect.display import answer_lines, run_bisect
    from tfrepro.bisect.engine import BisectOptions
    from tfrepro.project import Project

    src = Path(__file__).resolve().parent / "examples" / "demo"
    expected = json.loads((src / "expected.json").read_text(encoding="utf-8"))
    tmp = Path(tempfile.mkdtemp(prefix="tfrepro-demo-"))
    try:
        dest = tmp / "demo"
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".tfrepro", "__pycache__", "expected.json"))
        click.echo(f"demo project copied to {dest}")
        click.echo(f"planted bug: {expected.get('note', '')}", err=True)
        try:
            doc = run_bisect(Project.load(dest), BisectOptions(jobs=jobs), as_json=False)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        click.echo("\n".join(answer_lines(doc)))
        right = doc["status"] == expected["status"] and doc["culprits"] == expected["culprits"]
        if right:
            click.echo(f"the planted culprit was found: {', '.join(expected['culprits'])}")
        else:
            click.echo(f"expected {expected['symptom']}: {', '.join(expected['culprits'])}, "
                       f"got {doc['status']}", err=True)
        if keep:
            click.echo(f"kept: {dest}; try `tfrepro report {dest}`")
        sys.exit(0 if right else 1)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
