"""Commands on one project: features, check, annotate, clean, `run` (one
configuration, measured; `--expect` speaks `git bisect run`); env and envs:
the environments trials run in."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

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
    use_color,
)
from tfrepro.errors import TfreproError, UserError

if TYPE_CHECKING:
    from tfrepro.trials.values import TrialResult


@main.command()
@path_argument
@script_args_argument
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
        want: dict[str, bool] = {}  # `a=on,b=off` -> {"a": True, "b": False}
        for item in parse_names(set_):
            name, sep, state = item.partition("=")
            if not sep or state.lower() not in ("on", "off"):
                raise UserError(f"bad --set item {item!r}", hint="write NAME=on or NAME=off, comma-separated")
            want[name.strip()] = state.lower() == "on"
        if not want:
            raise UserError("--set needs at least one NAME=on|off")
        changed = project.set_states(want)
        if as_json:
            click.echo(json.dumps({"changed": changed}))
        else:
            click.echo("\n".join(f"rewrote {c}" for c in changed) or "nothing to change")
        return
    states = project.states_in_files()
    items = [
        {
            "name": name,
            "description": project.description(name),
            "state": {True: "on", False: "off", None: "mixed"}[states[name]],
            "affects_loss": name in project.affects_loss,
            "blocks": [
                {"file": f, "line": line, "state": "on" if b.state else "off"}
                for b, (f, line) in zip(blocks, project.locations(name))
            ],
        }
        for name, blocks in project.features.items()
    ]
    if as_json:
        doc = {
            "project": str(project.root),
            "detected": project.detected,
            "features": items,
            "excluded": project.excluded,
        }
        click.echo(json.dumps(doc, indent=2))
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


@main.command("annotate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--write", is_flag=True, help="Edit the files in place (default: print a unified diff).")
@click.option(
    "--only",
    metavar="NAME,...",
    help="Mark only these features: names (prefetch, jit_compile...) or kinds (callback, dataset, custom_layer).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was found (and the diff or files written) as JSON.")
def annotate_cmd(files: tuple[Path, ...], write: bool, only: str | None, as_json: bool) -> None:
    """Find the engineering features of existing training scripts and mark
    them as feature blocks, every one ON, so that `tfrepro bisect` can switch
    them. The annotated files run exactly as before.

    Without --write, prints a unified diff and changes nothing. The summary
    (features found, what was left alone and why) goes to stderr.
    """
    from tfrepro.annotate import annotate

    names = parse_names(only)
    result = annotate(files, only=names or None)
    unknown = [
        n for n in names if not any(f.name == n or f.kind == n or f.name.startswith(n + "_") for f in result.found)
    ]
    if as_json:  # the features proposed, what was left alone, the --only items that matched nothing, the diff
        keys = ("name", "kind", "file", "line", "description", "affects_loss", "note")  # "file": a Found's path
        doc = {
            "features": list(result.feature_names),
            "found": [{k: getattr(f, "path" if k == "file" else k) for k in keys} for f in result.found],
            "skipped": [{"file": s.path, "line": s.line, "reason": s.reason} for s in result.skipped],
            "manifest_problems": list(result.problems),
            "unknown_only": unknown,
        }
        if write:  # or the files written
            doc["written"] = [str(p) for p in result.write()]
        else:
            doc["diff"] = result.diff()
        click.echo(json.dumps(doc, indent=2))
        return
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
    if unknown:
        click.echo(f"  --only: nothing found for {', '.join(unknown)}", err=True)
    n = len(result.feature_names)
    verb = "marked" if write else "would mark"
    click.echo(
        f"{verb} {n} feature{'s' if n != 1 else ''}" + ("" if write or not n else " (run again with --write)"), err=True
    )


@main.command("check")
@cold_option
@path_argument
@script_args_argument
@click.option(
    "--with", "with_", metavar="A,B,...", help="Check with exactly these features ON (default: the baseline)."
)
@click.option("--all", "all_", is_flag=True, help="Check the failing configuration (every feature ON).")
@click.option("--steps", type=click.IntRange(min=4), help="Steps of the short run (default: [trial] steps).")
@click.option(
    "--params",
    "expect_params",
    type=click.IntRange(min=0),
    metavar="N",
    help="The total parameter count you expect (model.summary()'s 'Total params').",
)
@click.option(
    "--expect-gpu/--no-expect-gpu",
    default=None,
    help="Whether a GPU should be visible (default: guessed from CUDA_VISIBLE_DEVICES, the driver).",
)
@click.option("--no-cache", is_flag=True, help="Run even if the same probed trial is cached.")
@click.option("-v", "--verbose", is_flag=True, help="Show the evidence of the checks that pass too.")
@click.option("--json", "as_json", is_flag=True, help="Print the checklist as JSON.")
@replicas_option
@select_options
def check_cmd(
    path: Path,
    with_: str | None,
    all_: bool,
    steps: int | None,
    expect_params: int | None,
    expect_gpu: bool | None,
    no_cache: bool,
    verbose: bool,
    as_json: bool,
    replicas: int | None,
    only: str | None,
    skip: str | None,
) -> None:
    """The sanity checks to run before blaming a feature.

    Runs one configuration (the baseline by default: every feature OFF, a
    hand-written training loop kept as written) in one probed trial and
    prints a checklist, each check pass / warn / fail / skip with its
    evidence and the fix: 1 environment (versions, devices), 2 input
    pipeline (input-bound or not), 3 first batches (shapes, ranges, NaN/Inf,
    labels in [0, C), normalisation), 4 initial loss against chance, 5 a
    short run (the loss falls and stays finite), 6 parameter count.
    Exit code 1 when a check fails.
    """
    from tfrepro.bisect.events import BisectOptions
    from tfrepro.check.judge import CheckOptions, format_report
    from tfrepro.check.run import checked_features, run_checks
    from tfrepro.trials.trial import TrialOptions

    if with_ is not None and all_:
        raise UserError("--with and --all exclude each other", hint="give one of them")
    project = load_project(path, only, skip)
    enabled = checked_features(project, parse_names(with_) if with_ is not None else None, all_)
    settings = BisectOptions(steps=steps, replicas=replicas).trial_settings(project.manifest.trial)
    if not as_json:
        click.echo(f"checking {project.root.name} (one probed trial)...", err=True)
    report = run_checks(
        project,
        enabled,
        settings,
        options=CheckOptions(expect_params=expect_params),
        expect_gpu=expect_gpu,
        how=TrialOptions(use_cache=not no_cache),
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(format_report(report, color=use_color(sys.stdout), verbose=verbose))
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


@main.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print the environment as one JSON object.")
@click.option("--python", metavar="EXE", help="Describe the installation this interpreter runs (default: this one).")
def env_cmd(as_json: bool, python: str | None) -> None:
    """Versions (tfrepro, Python, TensorFlow, Keras, tf_keras, NumPy),
    devices, precision policy, XLA and determinism settings, and the TF_*,
    KERAS_*, CUDA_*, XLA_* environment variables (secret-looking values
    redacted, your home directory as ~).

    TensorFlow is imported in a child process only, as a trial would see it.
    """
    from tfrepro.report.answer import Env, of
    from tfrepro.report.envreport import collect, env_doc, env_lines
    from tfrepro.trials.confine import detect

    doc = env_doc(of(Env, collect(python=python, runtime=True)) or Env())
    conf = detect()
    doc["confinement"] = {"mode": conf.mode, "detail": conf.describe()}
    lines = [*env_lines(doc), f"confinement: {conf.describe()}"]
    click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(lines))


@main.command("envs")
@click.option("--prune", is_flag=True, help="Remove incomplete environments and those unused for --days.")
@click.option(
    "--days",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    help="With --prune: remove environments unused for this many days.",
)
@click.option("--all", "all_", is_flag=True, help="With --prune: remove every environment.")
@click.option("--json", "as_json", is_flag=True, help="Print the environments (or those removed) as JSON.")
def envs_cmd(prune: bool, days: float, all_: bool, as_json: bool) -> None:
    """List (or prune) the per-TensorFlow-version environments of `bisect --tf-versions`."""
    from tfrepro.trials.envs import EnvStore, envs_report

    doc, lines = envs_report(EnvStore(), prune=prune, max_age_days=days, everything=all_)
    click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(lines))


# `git bisect run`'s language: 0 good, 1 bad, 125 this commit cannot be tested.
GOOD, BAD, CANNOT_TEST = 0, 1, 125


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
    type=click.Choice(["nan", "crash", "timeout"]),
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

    from tfrepro.bisect.events import BisectOptions
    from tfrepro.trials.runner import run_trial
    from tfrepro.trials.state import prune_after_run
    from tfrepro.trials.trial import TrialOptions
    from tfrepro.trials.values import summary

    if sum([with_ is not None, all_, none_]) > 1:
        raise UserError("--with, --all and --none exclude each other", hint="give one of them")
    results = []
    try:
        project = load_project(path, only, skip)
        if with_ is not None:
            enabled = project.check_names(parse_names(with_))
        elif all_ or none_:
            enabled = frozenset(project.feature_names if all_ else ())
        else:  # as the files have them
            states = project.states_in_files()
            if mixed := sorted(n for n, s in states.items() if s is None):
                raise UserError(
                    f"feature {mixed[0]!r} is ON in some blocks and OFF in others",
                    path=project.root,
                    hint="say which configuration to run: --with a,b, --all or --none",
                )
            enabled = frozenset(n for n, s in states.items() if s)
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


# -- presentation of one trial (`tfrepro run`) ---------------------------------------


def describe(result: TrialResult) -> list[str]:
    """Human-readable lines for one trial."""
    from tfrepro.settings import WARMUP_STEPS
    from tfrepro.trials.classify import is_oom

    head = f"features on: {', '.join(result.enabled) or 'none'}" + ("  (cached)" if result.cached else "")
    lines = [f"{result.label}  {head}" if result.label else head]
    if result.timed_out:
        lines.append(f"TIMEOUT: {result.error}")
    elif result.crashed:
        lines.append(f"CRASH: {result.error or 'exit code ' + str(result.exit_code)}")
    if result.losses:
        n = len(result.losses)
        last = f", at step {n}: {result.losses[-1]:.6g}" if n > 1 else ""
        lines.append(f"{result.mode}: {n} step{'s' if n != 1 else ''}; loss at step 1: {result.losses[0]:.6g}{last}")
    elif not (result.crashed or result.timed_out):
        lines.append("no training step seen (no Model.fit, no `step=N loss=X` line)")
    if result.first_nonfinite_step is not None:
        lines.append(f"first non-finite loss at step {result.first_nonfinite_step}")
    if result.weights_finite is False:
        lines.append("non-finite weights at the end: " + ", ".join(result.nonfinite_weights))
    elif result.losses and result.first_nonfinite_step is None:
        lines.append("loss finite at every step" + (", weights finite" if result.weights_finite else ""))
    median = result.median_step_time()
    if median is not None:
        lines.append(f"median step time: {median * 1000:.3g} ms (steps {WARMUP_STEPS + 1}-{len(result.step_times)})")
    elif result.step_times:
        lines.append("median step time: too few steps past the warm-up")
    if is_oom(result):
        lines.append("out of memory: this counts as the memory symptom, not a crash")
    if result.peak_rss_bytes:
        text = f"peak memory: {result.peak_rss_bytes / 1e6:.0f} MB anonymous resident"
        if result.growth_per_step is not None:
            text += f", growth {result.growth_per_step / 1e6:+.2f} MB/step over the steady steps"
        if result.device_peak_bytes:
            text += f"; device peak {result.device_peak_bytes / 1e6:.0f} MB"
        lines.append(text)
    # what ran, e.g. "ran: fit#1 jit_compile=False; 2 replicas in sync; float32; 2 devices"
    parts = []
    modes = [m for m in result.compile_modes if str(m.get("call", "")).startswith("fit#")]
    modes = modes or list(result.compile_modes)
    if modes:
        parts.append(
            ", ".join(
                f"{m.get('call')} jit_compile={m.get('jit_compile')}" + (" (auto, pinned)" if m.get("pinned") else "")
                for m in modes
            )
        )
    if n := result.replicas_in_sync:
        parts.append(f"{n} replica{'s' if n != 1 else ''} in sync")
    if result.precision_policy:
        parts.append(result.precision_policy)
    if result.devices:
        parts.append(f"{len(result.devices)} device{'s' if len(result.devices) != 1 else ''}")
    if parts:
        lines.append("ran: " + "; ".join(parts))
    lines.extend(f"warning: {w}" for w in result.extra.get("warnings", []))
    if result.log_dir:
        lines.append(f"logs: {result.log_dir}")
    return lines
