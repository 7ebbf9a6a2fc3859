"""Commands on one project: features, run, check, annotate, clean, envs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tfrepro.cli.app import load_project, main, parse_names, parse_states, path_argument, select_options
from tfrepro.errors import UserError


@main.command()
@path_argument
@click.option("--set", "set_", metavar="NAME=on|off,...", help="Rewrite the features' states in the files.")
@click.option("--json", "as_json", is_flag=True, help="Print the features as JSON.")
@select_options
def features(path: Path, set_: str | None, as_json: bool, only: str | None, skip: str | None) -> None:
    """List the feature blocks of a project (or switch them with --set).

    --set is the only command that ever writes into your files; switching a
    feature and switching it back restores each file byte for byte.
    """
    project = load_project(path, only, skip)
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
            "blocks": [{"file": f, "line": line, "state": "on" if b.state else "off"}
                       for b, (f, line) in zip(blocks, project.locations(name))],
        })
    if as_json:
        click.echo(json.dumps({"project": str(project.root), "detected": project.detected, "features": items,
                               "excluded": project.excluded}, indent=2))
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
@path_argument
@click.option("--with", "with_", metavar="A,B,...", help="Run with exactly these features ON (all others OFF).")
@click.option("--all", "all_", is_flag=True, help="Every feature ON (the failing configuration).")
@click.option("--none", "none_", is_flag=True, help="Every feature OFF (the baseline).")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps, at most (default: [trial] steps).")
@click.option("--repeats", type=click.IntRange(min=1), help="Independent runs (default: [trial] repeats).")
@click.option("--no-cache", is_flag=True, help="Run even if the same trial is cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the trial summary as JSON.")
@select_options
def run(path: Path, with_: str | None, all_: bool, none_: bool, steps: int | None, repeats: int | None,
        no_cache: bool, as_json: bool, only: str | None, skip: str | None) -> None:
    """Run one configuration of a project and measure it.

    Without --with/--all/--none the features stay as the files have them.
    Prints the loss at the first and last step, the first non-finite step,
    non-finite weights, the median steady-state step time, a crash's last
    traceback line or a timeout. --json prints the trial summary (with
    --repeats K > 1: {"repeats": [summary, ...]}). Exit code 1 when a trial
    crashed or timed out.
    """
    from dataclasses import replace

    from tfrepro.trials.runner import describe, run_trial, summary
    from tfrepro.trials.state import prune_after_run

    if sum([with_ is not None, all_, none_]) > 1:
        raise UserError("--with, --all and --none exclude each other", hint="give one of them")
    project = load_project(path, only, skip)
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
    prune_after_run(project)
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
@select_options
def check_cmd(path: Path, with_: str | None, all_: bool, steps: int | None, expect_params: int | None,
              expect_gpu: bool | None, no_cache: bool, verbose: bool, as_json: bool, only: str | None,
              skip: str | None) -> None:
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

    if with_ is not None and all_:
        raise UserError("--with and --all exclude each other", hint="give one of them")
    project = load_project(path, only, skip)
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


@main.command("clean")
@path_argument
@click.option("--all", "all_", is_flag=True, help="Remove the whole .tfrepro/ directory, cache included.")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
def clean_cmd(path: Path, all_: bool, as_json: bool) -> None:
    """Free the disk space of .tfrepro/: every trial's project copy, scratch
    dirs, and runs and trials beyond [state] keep_runs / keep_trials (the cache
    stays). Deletes nothing outside .tfrepro/ and never follows a link."""
    from tfrepro.trials.state import clean_project

    pruned = clean_project(path, everything=all_)
    click.echo(json.dumps(pruned.to_dict()) if as_json else pruned.describe())


@main.command("envs")
@click.option("--prune", is_flag=True, help="Remove incomplete environments and those unused for --days.")
@click.option("--days", type=click.FloatRange(min=0), default=30, show_default=True,
              help="With --prune: remove environments unused for this many days.")
@click.option("--all", "all_", is_flag=True, help="With --prune: remove every environment.")
def envs_cmd(prune: bool, days: float, all_: bool) -> None:
    """List (or prune) the per-TensorFlow-version environments of `bisect --tf-versions`."""
    from tfrepro.trials.envs import envs_lines, prune_lines

    lines = prune_lines(max_age_days=days, everything=all_) if prune else envs_lines()
    click.echo("\n".join(lines))
