"""The command line: click commands only — parse, one call into the library, print.

Heavy modules (TensorFlow, copier, git, rich, matplotlib) are imported inside
the commands that need them, so `tfrepro --help` stays instant. Library errors
become one message and an exit code in `_Group.invoke`, and only there.
"""

from __future__ import annotations

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
    click.echo(f"symptom: {doc['symptom']}; culprits: {', '.join(doc['culprits']) or '(none)'}")
    if rep is None:
        click.echo("reproduced: not checked (--no-rerun)")
    else:
        word = {True: "yes", False: "NO", None: "undecided"}[rep["reproduced"]]
        click.echo(f"reproduced by the exported repro.py: {word} ({rep['detail']})")
    loc = doc.get("localization")
    if loc:
        click.echo(f"localisation: {loc['headline']}")
    for name, what in doc["artifacts"].items():
        click.echo(f"  {name}: {what}")
