"""The command line: click commands only — parse, one call into the library, print.

Heavy modules (TensorFlow, copier, git, rich, matplotlib) are imported inside
the commands that need them, so `tfrepro --help` stays instant. Library errors
become one message and an exit code in `_Group.invoke`, and only there.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from tfrepro import __version__
from tfrepro.errors import TfreproError, UserError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as e:
            click.echo(f"Error: {e.render()}", err=True)
            sys.exit(e.exit_code)
        except TfreproError as e:
            click.echo(f"Error: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tfrepro")
def main() -> None:
    """Find the TensorFlow/Keras feature behind a NaN, a slowdown or a loss
    mismatch, and turn it into a minimal repro and a bug report."""


def parse_states(value: str) -> dict[str, bool]:
    """`a=on,b=off` -> {"a": True, "b": False}."""
    states: dict[str, bool] = {}
    for item in filter(None, (x.strip() for x in value.split(","))):
        name, sep, state = item.partition("=")
        if not sep or state.lower() not in ("on", "off"):
            raise UserError(f"bad --set item {item!r}", hint="write NAME=on or NAME=off, comma-separated")
        states[name.strip()] = state.lower() == "on"
    if not states:
        raise UserError("--set needs at least one NAME=on|off")
    return states


def parse_names(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


path_argument = click.argument("path", default=".", type=click.Path(path_type=Path))


@main.command()
@path_argument
@click.option("--set", "set_", metavar="NAME=on|off,...", help="Rewrite the features' states in the files.")
@click.option("--json", "as_json", is_flag=True, help="Print the features as JSON.")
def features(path: Path, set_: str | None, as_json: bool) -> None:
    """List the feature blocks of a project (or switch them with --set).

    --set is the only command that ever writes into your files; switching a
    feature and switching it back restores each file byte for byte.
    """
    from tfrepro.project import Project

    project = Project.load(path)
    if set_:
        changed = project.set_states(parse_states(set_))
        if as_json:
            click.echo(json.dumps({"changed": changed}))
        else:
            click.echo("\n".join(f"rewrote {c}" for c in changed) or "nothing to change")
        return
    states = project.states_in_files()
    items = []
    for name, blocks in project.features.items():
        state = states[name]
        items.append({
            "name": name,
            "description": project.description(name),
            "state": "mixed" if state is None else ("on" if state else "off"),
            "affects_loss": name in project.affects_loss,
            "blocks": [{"file": str(Path(b.path).relative_to(project.root)), "line": b.line,
                        "state": "on" if b.state else "off"} for b in blocks],
        })
    if as_json:
        click.echo(json.dumps({"project": str(project.root), "features": items}, indent=2))
        return
    if not items:
        click.echo(f"no feature blocks in {project.root}")
        click.echo("  mark one with `# tfrepro: feature NAME -- description` ... `# tfrepro: end`")
        return
    width = max(len(i["name"]) for i in items)
    for i in items:
        where = ", ".join(f"{b['file']}:{b['line']}" for b in i["blocks"])
        extra = "  (affects loss)" if i["affects_loss"] else ""
        click.echo(f"{i['name']:<{width}}  {i['state']:<5}  {where}  {i['description']}{extra}")


@main.command()
@click.argument("run_dir", required=False, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Bundle directory (default: RUN_DIR/report).")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True,
              help="What to print: a summary and the bundle's path, or the report document as JSON.")
@click.option("--no-rerun", is_flag=True, help="Do not re-run the exported repro to confirm the symptom.")
@click.option("--no-localize", is_flag=True, help="Skip the check_numerics localisation of a NaN.")
def report(run_dir: Path | None, out: Path | None, fmt: str, no_rerun: bool, no_localize: bool) -> None:
    """Turn a bisect run into a bug-report bundle.

    RUN_DIR is a run directory (.tfrepro/runs/<id>) or a project; default: the
    latest run of the current directory. The bundle holds the standalone
    repro.py (re-run in a fresh process to confirm the symptom), ISSUE.md
    following TensorFlow's issue form, plots, TensorBoard event files and,
    for a NaN, the op and layer that produced the first non-finite value.
    Secrets are never recorded and your home directory shows as ~.
    """
    from tfrepro.report.bundle import build_report, find_run

    run = find_run(run_dir)
    if fmt == "md":
        click.echo(f"reporting run {run}", err=True)
    bundle = build_report(run, out=out, rerun=not no_rerun, localize=not no_localize)
    doc = bundle.doc
    if fmt == "json":
        click.echo(json.dumps({**doc, "bundle": str(bundle.out)}, indent=2))
        return
    rep = doc.get("reproduction")
    click.echo(f"bundle: {bundle.out}")
    if doc.get("first_bad_commit"):
        click.echo(f"symptom: {doc['symptom']}; first bad commit: {doc['first_bad_commit']}")
    else:
        click.echo(f"symptom: {doc['symptom']}; culprits: {', '.join(doc['culprits']) or '(none)'}")
    if rep is None:
        click.echo("reproduced: not checked (--no-rerun)")
    else:
        word = {True: "yes", False: "NO", None: "undecided"}[rep["reproduced"]]
        click.echo(f"reproduced by the exported repro.py: {word} ({rep['detail']})")
        if rep["reproduced"] is not True:
            click.echo("  hint: the standalone script does not show the symptom on its own; it may need files "
                       "the bundle lacks, or the failure is flaky (raise [trial] repeats and bisect again)",
                       err=True)
    loc = doc.get("localization")
    if loc:
        click.echo(f"localisation: {loc['headline']}")
    for name, what in doc["artifacts"].items():
        click.echo(f"  {name}: {what}")


@main.command()
@path_argument
@click.option("--with", "with_", metavar="A,B,...", help="Run with exactly these features ON (all others OFF).")
@click.option("--all", "all_", is_flag=True, help="Every feature ON (the failing configuration).")
@click.option("--none", "none_", is_flag=True, help="Every feature OFF (the baseline).")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps, at most (default: [trial] steps).")
@click.option("--repeats", type=click.IntRange(min=1), help="Independent runs (default: [trial] repeats).")
@click.option("--no-cache", is_flag=True, help="Run even if the same trial is cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the trial summary as JSON.")
def run(path: Path, with_: str | None, all_: bool, none_: bool, steps: int | None, repeats: int | None,
        no_cache: bool, as_json: bool) -> None:
    """Run one configuration of a project and measure it.

    Without --with/--all/--none the features stay as the files have them.
    Prints the loss at the first and last step, the first non-finite step,
    non-finite weights, the median steady-state step time, a crash's last
    traceback line or a timeout. --json prints the trial summary (with
    --repeats K > 1: {"repeats": [summary, ...]}). Exit code 1 when a trial
    crashed or timed out.
    """
    from dataclasses import replace

    from tfrepro.project import Project
    from tfrepro.trials.runner import describe, run_trial, summary

    if sum([with_ is not None, all_, none_]) > 1:
        raise UserError("--with, --all and --none exclude each other", hint="give one of them")
    project = Project.load(path)
    if with_ is not None:
        enabled = project.check_names(parse_names(with_))
    elif all_:
        enabled = frozenset(project.feature_names)
    elif none_:
        enabled = frozenset()
    else:
        states = project.states_in_files()
        mixed = sorted(n for n, s in states.items() if s is None)
        if mixed:
            raise UserError(f"feature {mixed[0]!r} is ON in some blocks and OFF in others", path=project.root,
                            hint="say which configuration to run: --with a,b, --all or --none")
        enabled = frozenset(n for n, s in states.items() if s)
    settings = project.manifest.trial
    if steps is not None:
        settings = replace(settings, steps=steps)
    results = []
    for i in range(repeats or project.manifest.repeats):
        if not as_json:
            click.echo(f"running {project.root.name} ({i + 1})...", err=True)
        results.append(run_trial(project, enabled, replace(settings, repeat=i), use_cache=not no_cache))
    if as_json:
        out = summary(results[0]) if len(results) == 1 else {"repeats": [summary(r) for r in results]}
        click.echo(json.dumps(out, indent=2))
    else:
        for i, r in enumerate(results):
            if len(results) > 1:
                click.echo(f"-- run {i + 1}")
            click.echo("\n".join(describe(r)))
    if any(r.crashed or r.timed_out for r in results):
        sys.exit(1)


@main.command("annotate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--write", is_flag=True, help="Edit the files in place (default: print a unified diff).")
@click.option("--only", metavar="NAME,...",
              help="Mark only these features: names (prefetch, jit_compile...) or kinds (callback, dataset, custom_layer).")
def annotate_cmd(files: tuple[Path, ...], write: bool, only: str | None) -> None:
    """Find the engineering features of existing training scripts and mark
    them as feature blocks, every one ON, so that `tfrepro bisect` can switch
    them. The annotated files run exactly as before.

    Without --write, prints a unified diff and changes nothing. The summary
    (features found, what was left alone and why) goes to stderr.
    """
    from tfrepro.annotate import annotate

    names = parse_names(only)
    result = annotate(files, only=names or None)
    if write:
        for p in result.write():
            click.echo(f"wrote {p}")
    else:
        click.echo(result.diff(), nl=False)
    for f in result.found:
        click.echo(f"  {f.name:<28} {f.where}  {f.description}", err=True)
        if f.note:
            click.echo(f"  {'':<28} note: {f.note}", err=True)
    for s in result.skipped:
        click.echo(f"  left alone: {s.where}: {s.reason}", err=True)
    for p in result.problems:
        click.echo(f"  manifest: {p}", err=True)
    unknown = [n for n in names if not any(f.name == n or f.kind == n or f.name.startswith(n + "_")
                                           for f in result.found)]
    if unknown:
        click.echo(f"  --only: nothing found for {', '.join(unknown)}", err=True)
    n = len(result.feature_names)
    verb = "marked" if write else "would mark"
    click.echo(f"{verb} {n} feature{'s' if n != 1 else ''}" + ("" if write or not n else " (run again with --write)"),
               err=True)


@main.command("check")
@path_argument
@click.option("--with", "with_", metavar="A,B,...", help="Check with exactly these features ON (default: the baseline).")
@click.option("--all", "all_", is_flag=True, help="Check the failing configuration (every feature ON).")
@click.option("--steps", type=click.IntRange(min=4), help="Steps of the short run (default: [trial] steps).")
@click.option("--params", "expect_params", type=click.IntRange(min=0), metavar="N",
              help="The total parameter count you expect (model.summary()'s 'Total params').")
@click.option("--expect-gpu/--no-expect-gpu", default=None,
              help="Whether a GPU should be visible (default: guessed from CUDA_VISIBLE_DEVICES, the driver).")
@click.option("--no-cache", is_flag=True, help="Run even if the same probed trial is cached.")
@click.option("-v", "--verbose", is_flag=True, help="Show the evidence of the checks that pass too.")
@click.option("--json", "as_json", is_flag=True, help="Print the checklist as JSON.")
def check_cmd(path: Path, with_: str | None, all_: bool, steps: int | None, expect_params: int | None,
              expect_gpu: bool | None, no_cache: bool, verbose: bool, as_json: bool) -> None:
    """The sanity checks to run before blaming a feature.

    Runs one configuration (the baseline, every feature OFF, by default) in
    one probed trial and prints a checklist, each check pass / warn / fail /
    skip with its evidence and the fix: 1 environment (versions, devices),
    2 input pipeline (input-bound or not), 3 first batches (shapes, ranges,
    NaN/Inf, labels in [0, C), normalisation), 4 initial loss against chance,
    5 a short run (the loss falls and stays finite), 6 parameter count.
    Exit code 1 when a check fails.
    """
    from dataclasses import replace

    from tfrepro.check.judge import CheckOptions, format_report
    from tfrepro.check.run import run_checks
    from tfrepro.project import Project

    if with_ is not None and all_:
        raise UserError("--with and --all exclude each other", hint="give one of them")
    project = Project.load(path)
    if with_ is not None:
        enabled = project.check_names(parse_names(with_))
    else:
        enabled = frozenset(project.feature_names) if all_ else frozenset()
    settings = project.manifest.trial
    if steps is not None:
        settings = replace(settings, steps=steps)
    if not as_json:
        click.echo(f"checking {project.root.name} (one probed trial)...", err=True)
    report = run_checks(project, enabled, settings, options=CheckOptions(expect_params=expect_params),
                        expect_gpu=expect_gpu, use_cache=not no_cache)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(format_report(report, color=sys.stdout.isatty(), verbose=verbose))
    if not report.ok:
        sys.exit(1)


@main.command("new")
@click.argument("dest", required=False, type=click.Path(path_type=Path))
@click.option("--template", "-t", "template", default="image", show_default=True,
              help="Task shape: image (small CNN), tabular (MLP), sequence (embedding/time series + LSTM, GRU "
                   "or attention).")
@click.option("--defaults", is_flag=True, help="Take the default answer to every question not given with --data.")
@click.option("--data", "-d", "data", multiple=True, metavar="KEY=VALUE",
              help="Answer a question, e.g. -d batch_size=64 -d features=prefetch,mixed_precision (repeatable).")
def new_cmd(dest: Path | None, template: str, defaults: bool, data: tuple[str, ...]) -> None:
    """Create a baseline repro project (DEST, default ./repro-TEMPLATE).

    repro.py holds data, model and train; each engineering feature your real
    project uses is a switchable block, written OFF. The project is a git
    repository with the baseline committed. Asks the questions on the terminal
    unless --defaults or --data is given.
    """
    from tfrepro.scaffold.generate import new_project, parse_data_items

    answers = parse_data_items(data)
    interactive = not defaults and not answers
    if interactive and not sys.stdin.isatty():
        raise UserError("no terminal to ask the template's questions on",
                        hint="pass --defaults, and --data KEY=VALUE for the answers that differ")
    created = new_project(dest or Path(f"repro-{template}"), template=template, data=answers,
                          defaults=not interactive)
    click.echo(f"created {created.path} (template {created.template} {created.version}); "
               f"baseline committed as {created.commit[:10]}")
    click.echo("features, all OFF: " + (", ".join(created.features) or "(none)"))
    click.echo(f"next: cd {created.path} && python repro.py   # the baseline must train; then: tfrepro bisect")


@main.command("update")
@path_argument
def update_cmd(path: Path) -> None:
    """Move a project made by `tfrepro new` to the current template version,
    keeping your committed edits (copier's three-way update). The result is
    left uncommitted: review it with `git diff`, then commit."""
    from tfrepro.scaffold.update import update_project

    result = update_project(path)
    if result.up_to_date:
        click.echo(f"{result.path}: already at template {result.template} {result.new_version}")
        return
    click.echo(f"{result.path}: template {result.template} {result.old_version} -> {result.new_version}")
    for f in result.changed:
        click.echo(f"  {'conflict' if f in result.conflicts else 'changed '}  {f}")
    if result.conflicts:
        click.echo("resolve the conflict markers (<<<<<<< ... >>>>>>>) in the files above, then commit", err=True)
    else:
        click.echo("review with `git diff`, then commit")


_SYMPTOMS = ["nan", "crash", "timeout", "mismatch", "slowdown"]


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
@click.option("--good", metavar="REV", help="Commit mode: a commit without the symptom.")
@click.option("--bad", metavar="REV", help="Commit mode: a commit with the symptom.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where trials run: this machine (--jobs at a time) or a Ray cluster (one task per trial; "
                   "needs pip install 'tfrepro[ray]').")
@click.option("--address", metavar="ADDR",
              help="With --executor ray: the cluster to join (e.g. 10.0.0.5:6379); default: a local Ray instance.")
@click.option("--replays", type=click.IntRange(min=1), metavar="N",
              help="Fresh runs of the answer at the end (default 3); for a slowdown, fresh timing pairs "
                   "added to the evidence (default 1).")
@click.option("--timing-budget", type=click.FloatRange(min=0.01), metavar="SECONDS",
              help="Steady-state seconds each timing trial measures (default 1.0, and at least 30 steps).")
def bisect_cmd(path: Path, symptom: str | None, strategy: str, steps: int | None, repeats: int | None,
               jobs: int, no_cache: bool, as_json: bool, good: str | None, bad: str | None,
               executor: str, address: str | None, replays: int | None, timing_budget: float | None) -> None:
    """Find the feature, or smallest set of interacting features, behind a symptom.

    Runs the baseline (every feature OFF) and the failing configuration
    (every feature ON), picks the symptom the failing one shows, searches for
    a minimal set of culprits, and replays the answer: a failure that does
    not reproduce every time is reported as flaky, never blamed on a
    feature. The run is kept in .tfrepro/runs/<id>/ (result.json, every
    trial's summary and logs). Interrupted? Run the same command again:
    finished trials come from the cache. Exit code 0 when a culprit was found
    or the failing configuration is healthy, 1 otherwise.

    With --good REV --bad REV: the first commit whose trial shows the symptom.
    Each tried commit runs as written, copied out of git under .tfrepro/
    (your working tree, index, branch and stash are never touched); the good
    commit is the reference; a commit that fails otherwise (syntax error,
    another crash) is skipped, and skips that hide the answer list the
    candidate commits. Exit code 1 when the ends do not hold.
    """
    if good or bad:
        from tfrepro.bisect.commits_cli import run_from_cli

        sys.exit(run_from_cli(path, good, bad, symptom=symptom, as_json=as_json, steps=steps,
                              use_cache=not no_cache, executor=executor, address=address))
    from tfrepro.bisect.display import answer_lines, run_bisect
    from tfrepro.bisect.engine import BisectOptions
    from tfrepro.check.run import checks_for_result
    from tfrepro.project import Project
    from tfrepro.trials.values import Verdict

    project = Project.load(path)
    options = BisectOptions(symptom=Verdict(symptom) if symptom else None, strategy=strategy, steps=steps,
                            repeats=repeats, jobs=jobs, use_cache=not no_cache, executor=executor,
                            address=address, baseline_checks=checks_for_result)
    if replays is not None:
        options = dataclasses.replace(options, replays=replays, timing_replays=replays)
    if timing_budget is not None:
        options = dataclasses.replace(options, timing_budget_s=timing_budget)
    try:
        doc = run_bisect(project, options, as_json=as_json)
    except KeyboardInterrupt:
        click.echo("interrupted: finished trials are cached; run the same command again to continue", err=True)
        sys.exit(130)
    click.echo(json.dumps(doc) if as_json else "\n".join(answer_lines(doc)))
    sys.exit(0 if doc["status"] in ("found", "none") else 1)


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
