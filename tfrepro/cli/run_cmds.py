"""`tfrepro run`: one configuration, measured; `--expect` speaks `git bisect run`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tfrepro.cli.app import (
    _fail,
    cold_option,
    load_project,
    main,
    parse_names,
    path_argument,
    replicas_option,
    script_args_argument,
    select_options,
)
from tfrepro.errors import TfreproError, UserError

# `git bisect run`'s language: 0 good, 1 bad, 125 this commit cannot be tested.
GOOD, BAD, CANNOT_TEST = 0, 1, 125
EXPECTABLE = ["nan", "crash", "timeout"]


def expect_verdict(results, symptom: str) -> tuple[int, str]:
    """(exit code, reason) of `run --expect SYMPTOM`: bad when any run shows
    the symptom, cannot-test when a run crashed or timed out otherwise (or
    saw no training step), else good."""

    def shows(r) -> bool:  # no reference needed for these three symptoms
        return {"nan": r.nonfinite, "crash": r.crashed and not r.nonfinite, "timeout": r.timed_out}[symptom]

    if any(shows(r) for r in results):
        return BAD, "present"
    for r in results:
        if r.could_not_run:
            return CANNOT_TEST, "the trial could not run"
        if r.timed_out:
            return CANNOT_TEST, "timed out (not the symptom expected)"
        if r.crashed:
            return CANNOT_TEST, f"crashed (not the symptom expected): {r.error or 'exit code ' + str(r.exit_code)}"
        if not r.losses and symptom == "nan":
            return CANNOT_TEST, "no training step seen: nothing to judge"
    return GOOD, "absent"


def _enabled(project, with_: str | None, all_: bool, none_: bool) -> frozenset[str]:
    if with_ is not None:
        return project.check_names(parse_names(with_))
    if all_:
        return frozenset(project.feature_names)
    if none_:
        return frozenset()
    states = project.states_in_files()
    mixed = sorted(n for n, s in states.items() if s is None)
    if mixed:
        raise UserError(
            f"feature {mixed[0]!r} is ON in some blocks and OFF in others",
            path=project.root,
            hint="say which configuration to run: --with a,b, --all or --none",
        )
    return frozenset(n for n, s in states.items() if s)


@main.command()
@cold_option
@path_argument
@script_args_argument
@click.option("--with", "with_", metavar="A,B,...", help="Run with exactly these features ON (all others OFF).")
@click.option("--all", "all_", is_flag=True, help="Every feature ON (the failing configuration).")
@click.option("--none", "none_", is_flag=True, help="Every feature OFF (the baseline).")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps, at most (default: [trial] steps).")
@click.option("--repeats", type=click.IntRange(min=1), help="Independent runs (default: [trial] repeats).")
@click.option("--no-cache", is_flag=True, help="Run even if the same trial is cached.")
@click.option(
    "--expect",
    type=click.Choice(EXPECTABLE),
    metavar="SYMPTOM",
    help="Exit 0 if the symptom (nan, crash, timeout) is absent, 1 if present, 125 if the run could "
    "not test it: `git bisect run tfrepro run --expect nan`.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the trial summary as JSON.")
@replicas_option
@select_options
def run(
    path: Path,
    with_: str | None,
    all_: bool,
    none_: bool,
    steps: int | None,
    repeats: int | None,
    no_cache: bool,
    expect: str | None,
    as_json: bool,
    replicas: int | None,
    only: str | None,
    skip: str | None,
) -> None:
    """Run one configuration of a project and measure it.

    Without --with/--all/--none the features stay as the files have them.
    Prints the loss at the first and last step, the first non-finite step,
    non-finite weights, the median steady-state step time, a crash's last
    traceback line or a timeout. --json prints the trial summary (with
    --repeats K > 1: {"repeats": [summary, ...]}). Exit code 1 when a trial
    crashed, timed out or went non-finite.

    With --expect SYMPTOM, exit codes speak `git bisect run`: 0 the symptom
    is absent (good), 1 present (bad), 125 the run could not test it (a
    crash or a timeout that is not the symptom, a project that cannot be
    loaded): `git bisect start BAD GOOD && git bisect run tfrepro run --expect nan`.
    """
    from dataclasses import replace

    from tfrepro.bisect.options import BisectOptions
    from tfrepro.trials.runner import run_trial
    from tfrepro.trials.state import prune_after_run
    from tfrepro.trials.trial import TrialOptions

    if sum([with_ is not None, all_, none_]) > 1:
        raise UserError("--with, --all and --none exclude each other", hint="give one of them")
    results = []
    try:
        project = load_project(path, only, skip)
        enabled = _enabled(project, with_, all_, none_)
        settings = BisectOptions(steps=steps, replicas=replicas).trial_settings(project.manifest.trial)
        for i in range(repeats or project.manifest.repeats):
            if not as_json:
                click.echo(f"running {project.root.name} ({i + 1})...", err=True)
            how = TrialOptions(use_cache=not no_cache)
            results.append(run_trial(project, enabled, replace(settings, repeat=i), how))
        prune_after_run(project)
    except TfreproError as e:  # UserError too: str(e) is its render()
        if expect is None:
            raise
        _fail(str(e), CANNOT_TEST, as_json)
    _print_results(results, expect, as_json)


def _print_results(results: list, expect: str | None, as_json: bool) -> None:
    from tfrepro.trials.runner import describe
    from tfrepro.trials.values import summary

    # plain `run`: 1 when a trial crashed, timed out, went non-finite or could not run
    failed = any(r.crashed or r.timed_out or r.nonfinite or r.could_not_run for r in results)
    code, reason = expect_verdict(results, expect) if expect else (int(failed), "")
    if as_json:
        out = summary(results[0]) if len(results) == 1 else {"repeats": [summary(r) for r in results]}
        if expect:
            out["expect"] = {"symptom": expect, "exit_code": code, "reason": reason}
        click.echo(json.dumps(out, indent=2))
    else:
        for i, r in enumerate(results):
            if len(results) > 1:
                click.echo(f"-- run {i + 1}")
            click.echo("\n".join(describe(r)))
        if expect:
            click.echo(
                f"expect {expect}: {reason} -> exit {code} "
                f"({({GOOD: 'good', BAD: 'bad', CANNOT_TEST: 'cannot test'})[code]})"
            )
    sys.exit(code)
