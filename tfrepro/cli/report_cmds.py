"""`tfrepro report`, and the templates: `new`, `update`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tfrepro.cli.app import cold_option, main, path_argument, replicas_option, script_args, script_args_argument
from tfrepro.errors import UserError


@main.command()
@cold_option
@click.argument("run_dir", required=False, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Bundle directory (default: RUN_DIR/report).")
@click.option("--json", "as_json", is_flag=True, help="Print the report document as JSON (progress stays on stderr).")
@click.option("--no-rerun", is_flag=True, help="Do not re-run the exported repro to confirm the symptom.")
@click.option("--no-localize", is_flag=True, help="Skip the check_numerics localisation of a NaN.")
@click.option(
    "--nightly",
    is_flag=True,
    help="Also re-run the repro on the newest tf-nightly (its own environment in the user cache) "
    "and answer the form's nightly question from it.",
)
@click.option(
    "--no-data",
    is_flag=True,
    help="No synthetic stand-ins for the data files the script read: the repro needs your data (none is shipped).",
)
@replicas_option
@click.option("--force", is_flag=True, help="Draft a bug report even when the answer is a known cost.")
def report(
    run_dir: Path | None,
    out: Path | None,
    as_json: bool,
    no_rerun: bool,
    no_localize: bool,
    nightly: bool,
    no_data: bool,
    replicas: int | None,
    force: bool,
) -> None:
    """Turn a bisect run into a bug-report bundle.

    RUN_DIR is a run directory (.tfrepro/runs/<id>) or a project; default: the
    latest run of the current directory. The bundle holds the standalone
    repro.py (re-run in a fresh process to confirm the symptom), ISSUE.md
    following TensorFlow's issue form, plots, TensorBoard event files and,
    for a NaN, the op and layer that produced the first non-finite value.
    Secrets are never recorded and your home directory shows as ~.
    """
    from tfrepro.report.bundle import ReportOptions, build_report, find_run, load_result, write_explanation

    run = find_run(run_dir)
    click.echo(f"reporting run {run}", err=True)
    result = {} if force else load_result(run)
    if cost := result.get("known_cost"):  # a known cost: EXPLANATION.md with the fix, no bug report
        path = write_explanation(run, result, out)
        if as_json:
            click.echo(json.dumps({"status": "known_cost", "known_cost": cost, "explanation": str(path)}, indent=2))
        else:
            click.echo(f"known cost, not a bug: {cost['reason']}")
            click.echo(f"fix: {cost['fix']}")
            click.echo(f"explanation: {path} (no bug report drafted; --force drafts one)")
        return
    if nightly and no_rerun:
        raise UserError("--nightly re-runs the repro, --no-rerun says not to", hint="drop one of them")
    how = ReportOptions(
        rerun=not no_rerun, localize=not no_localize, nightly=nightly, no_data=no_data, replicas=replicas
    )
    bundle = build_report(run, how, out=out, progress=lambda line: click.echo(line, err=True))
    r = bundle.report
    if as_json:
        click.echo(json.dumps({**r.json(), "bundle": str(bundle.out)}, indent=2))
        return
    rep = r.reproduction
    click.echo(f"bundle: {bundle.out}")
    if r.first_bad_commit:
        click.echo(f"symptom: {r.symptom}; first bad commit: {r.first_bad_commit}")
    else:
        click.echo(f"symptom: {r.symptom}; culprits: {', '.join(r.culprits or []) or '(none)'}")
    if rep is None:
        click.echo("reproduced: not checked (--no-rerun)")
    else:
        word = {True: "yes", False: "NO", None: "undecided"}[rep.reproduced]
        click.echo(f"reproduced by the exported repro.py: {word} ({rep.detail})")
        if rep.reproduced is not True:
            click.echo(
                "  hint: the standalone script does not show the symptom on its own; it may need files "
                "the bundle lacks, or the failure is flaky (raise [trial] repeats and bisect again)",
                err=True,
            )
    if r.localization:
        click.echo(f"localisation: {r.localization.headline()}")
    for name, what in (r.artifacts or {}).items():
        click.echo(f"  {name}: {what}")


@main.command("new")
@cold_option
@click.argument("dest", required=False, type=click.Path(path_type=Path))
@script_args_argument
@click.option(
    "--from",
    "from_script",
    type=click.Path(path_type=Path),
    metavar="SCRIPT",
    help="Start from your own training script: its data (stand-ins), model and train, each detected feature a block OFF.",
)
@click.option(
    "--template",
    "-t",
    "template",
    default="image",
    show_default=True,
    help="Task shape: image (small CNN), tabular (MLP), sequence (embedding/time series + LSTM, GRU or attention).",
)
@click.option("--defaults", is_flag=True, help="Take the default answer to every question not given with --data.")
@click.option(
    "--data",
    "-d",
    "data",
    multiple=True,
    metavar="KEY=VALUE",
    help="Answer a question, e.g. -d batch_size=64 -d features=prefetch,mixed_precision (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the created project as JSON (needs --defaults or --data).")
def new_cmd(
    dest: Path | None, from_script: Path | None, template: str, defaults: bool, data: tuple[str, ...], as_json: bool
) -> None:
    """Create a baseline repro project (DEST, default ./repro-TEMPLATE).

    repro.py holds data, model and train; each engineering feature your real
    project uses is a switchable block, written OFF. The project is a git
    repository with the baseline committed. Asks the questions on the terminal
    unless --defaults or --data is given.
    """
    from tfrepro.scaffold.generate import new_project, parse_data_items

    if from_script is not None or template == "script":
        if from_script is None or data or template not in ("image", "script"):
            raise UserError(
                "--from takes no --template/--data" if from_script else "the script template is for --from only",
                hint="tfrepro new --from train.py [DEST]",
            )
        args = script_args()
        if dest is not None and str(dest).startswith("-"):  # `new --from train.py -- --epochs 3`: no DEST
            dest, args = None, (str(dest), *args)
        return _new_from(from_script, dest, as_json, args)
    if script_args():
        raise UserError(
            "the script's arguments (after `--`) are for --from only", hint="tfrepro new --from train.py [DEST] -- ARGS"
        )
    answers = parse_data_items(data)
    interactive = not defaults and not answers
    if interactive and (as_json or not sys.stdin.isatty()):
        raise UserError(
            "--json asks no questions" if as_json else "no terminal to ask the template's questions on",
            hint="pass --defaults, and --data KEY=VALUE for the answers that differ",
        )
    created = new_project(dest or Path(f"repro-{template}"), template=template, data=answers, defaults=not interactive)
    if as_json:  # default=str: the path as text (the features' tuple is a list in JSON)
        keys = ("path", "template", "version", "commit", "features")
        click.echo(json.dumps({k: getattr(created, k) for k in keys}, indent=2, default=str))
        return
    click.echo(
        f"created {created.path} (template {created.template} {created.version}); "
        f"baseline committed as {created.commit[:10]}"
    )
    click.echo("features, all OFF: " + (", ".join(created.features) or "(none)"))
    click.echo(f"next: cd {created.path} && python repro.py   # the baseline must train; then: tfrepro bisect")


def _new_from(script: Path, dest: Path | None, as_json: bool, args: tuple[str, ...]) -> None:
    """`tfrepro new --from train.py [DEST] [-- ARGS]`: report/newfrom.py's files in the script template."""
    import shlex

    from tfrepro.report.newfrom import export_script, load_script, recorded_args, summary_lines
    from tfrepro.scaffold.generate import check_destination, new_project

    project = load_script(script, args)  # bad input first (exit 2), nothing written
    entry = project.manifest.trial.entry
    if not args and project.manifest.trial.command is None:
        recorded, run = recorded_args(project.root, entry)
        if recorded:  # `tfrepro bisect train.py -- ARGS` ran before: its arguments
            click.echo(f"new --from: the script's arguments of the latest run {run}: {shlex.join(recorded)}", err=True)
            project = load_script(script, recorded)
    dest = dest or Path(f"repro-{script.stem}")
    check_destination(dest.expanduser().absolute())
    got = export_script(project, say=lambda line: click.echo(f"new --from: {line}", err=True))
    click.echo(f"new --from: writing the project to {dest} (copier template script, baseline committed)", err=True)
    created = new_project(dest, template="script", data=got.answers(), files=got.written)
    if as_json:
        doc = {"path": str(created.path), "template": "script", "version": created.version, "commit": created.commit}
        commented = [{"line": c.line, "code": c.code, "names": list(c.names)} for c in got.commented]
        doc.update(got.answers(), files=sorted(got.written), data_facts=got.data_facts.to_dict(), commented=commented)
        click.echo(json.dumps(doc))
        return
    click.echo(f"created {created.path} from {script}; baseline committed as {created.commit[:10]}")
    click.echo("features, all OFF: " + (", ".join(got.features) or "(none)"))
    for line in summary_lines(got):
        click.echo(line)
    click.echo(f"next: cd {created.path} && python repro.py   # the baseline; then: tfrepro bisect")


@main.command("update")
@path_argument
@click.option("--json", "as_json", is_flag=True, help="Print the update (versions, files changed, conflicts) as JSON.")
def update_cmd(path: Path, as_json: bool) -> None:
    """Move a project made by `tfrepro new` to the current template version,
    keeping your committed edits (copier's three-way update). The result is
    left uncommitted: review it with `git diff`, then commit."""
    from tfrepro.scaffold.generate import update_project

    result = update_project(path)
    if as_json:  # default=str: the path as text (tuples are lists in JSON)
        keys = ("path", "template", "old_version", "new_version", "up_to_date", "changed", "conflicts")
        click.echo(json.dumps({k: getattr(result, k) for k in keys}, indent=2, default=str))
        return
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
