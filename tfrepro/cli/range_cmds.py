"""`tfrepro bisect --good REV --bad REV` and `--tf-versions A,B,...`: progress
and answer on the terminal.

The presentation of the range modes (`bisect/commits.py` and
`bisect/versions.py` do the work): progress lines on stderr as points are
tried (the versions expanded, environment builds), the answer on stdout (or
exactly one JSON object with --json), the exit code (Contract 4: 0 found, 1
the ends do not hold or an error, 3 none, 4 ambiguous). Bad input raises
UserError (exit 2); Ctrl-C propagates.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from tfrepro.bisect.commits import CommitFields, bisect_commits
from tfrepro.bisect.events import ProgressLines
from tfrepro.bisect.options import BisectOptions
from tfrepro.bisect.ranges import RangeEvidence
from tfrepro.bisect.versions import Releases, ThenFeatures, VersionFields, expand_versions, feature_hook
from tfrepro.errors import UserError
from tfrepro.trials.values import RunResult


def _evidence(result: RunResult) -> RangeEvidence | None:
    return result.evidence if isinstance(result.evidence, RangeEvidence) else None


def cost_line(result: RunResult) -> str:
    """The last line of a range bisection's answer: trials, cache hits, wall time, run dir."""
    ev = _evidence(result)
    cached = f", {ev.cached_trials} from cache" if ev is not None and ev.cached_trials else ""
    return f"{result.trials} trials{cached}, {result.wall_s:.1f} s; run: {result.run_dir}"


def _symptom(result: RunResult) -> str | None:
    return result.symptom.value if result.symptom is not None else None


def commits_answer(result: RunResult) -> str:
    """The human summary of a commit bisection (the tried commits are
    printed as they go, see `run_commits`)."""
    status, ev = result.status.value, _evidence(result)
    mode = ev.mode if ev is not None else None
    if status == "found" and isinstance(mode, CommitFields) and (c := mode.commit) is not None:
        head = [f"first bad commit ({_symptom(result)}): {c.sha}", f"  {c.subject}", f"  {c.author}, {c.date}"]
    elif status == "ambiguous":
        head = [f"{_symptom(result)}: the first bad commit is one of:"]
        head += [f"  {c['sha'][:12]}  {c['subject']}" for c in result.candidates]
    else:
        head = [f"{status}: {ev.message if ev is not None and ev.message else ''}"]
    return "\n".join([*head, cost_line(result)])


def run_commits(
    path: str | Path,
    good: str | None,
    bad: str | None,
    options: BisectOptions = BisectOptions(),
    *,
    as_json: bool = False,
    echo: Callable[..., None] = click.echo,
) -> int:
    """What `tfrepro bisect --good REV --bad REV` does (`options`: the
    symptom, --steps, the cache, the executor, --timing-budget); returns the
    exit code."""
    if not good or not bad:
        raise UserError(
            "commit mode needs both --good REV and --bad REV", hint="e.g. tfrepro bisect --good v1.2 --bad HEAD"
        )
    from tfrepro.trials.executors import make_executor

    o = options
    runs_on = make_executor(o.executor, jobs=o.jobs, address=o.address, log=lambda text: echo(text, err=True))
    try:
        events = None if as_json else ProgressLines(echo, 12)
        result = bisect_commits(path, good, bad, options, events=events, executor=runs_on)
    finally:
        runs_on.close()
    echo(json.dumps(result.to_dict()) if as_json else commits_answer(result))
    return result.exit_code


def versions_answer(result: RunResult, notes: list[str]) -> str:
    """The human summary of a version bisection: the answer, then one line
    per release, the `notes`, the cost."""
    lines: list[str] = []
    status, ev = result.status.value, _evidence(result)
    mode = ev.mode if ev is not None and isinstance(ev.mode, VersionFields) else None
    if status == "found":
        lines.append(
            f"first bad version ({_symptom(result)}): {result.first_bad_version}"
            f"  (last good: {result.last_good_version})"
        )
        then = mode.then_features if mode is not None else None
        if then:
            inside = (
                f"and only with {' + '.join(then['culprits'])} on"
                if then.get("culprits")
                else f"feature bisect inside it: {then.get('status')}"
            )
            lines.append(f"  {inside} (run: {then.get('run_dir')})")
        if mode is not None and mode.follows_note:
            lines.append(f"  follows {mode.follows}: {mode.follows_note}")
    elif status == "ambiguous":
        lines.append(f"{_symptom(result)}: the first bad version is one of {', '.join(result.candidates)}")
    else:
        lines.append(f"{status}: {ev.message if ev is not None and ev.message else ''}")
    for row in mode.versions if mode is not None else ():
        what = row.verdict if row.verdict in ("ok", "not tried", "untestable", "excluded") else "BAD"
        shows = f" [{', '.join(row.shows)}]" if row.shows else ""
        keras = f"  keras {row.keras}" + (" (tf_keras)" if row.keras_lib == "tf_keras" else "") if row.keras else ""
        note = f"  {row.note}" if row.note else ""
        lines.append(f"  {row.version:<14} {what:<10}{shows}{keras}{note}")
    lines += [f"note: {n}" for n in notes]
    lines.append(cost_line(result))
    return "\n".join(lines)


def run_versions(
    path: str | Path,
    tf_versions: str,
    options: BisectOptions,
    releases: Releases,
    *,
    then_features: ThenFeatures | None,
    as_json: bool,
) -> int:
    """What `tfrepro bisect --tf-versions ...` does (`options`: the symptom,
    --steps, the cache, --timing-budget; `releases`: the ends, --keras,
    --tf-dist); returns the exit code."""
    from tfrepro.bisect.versions import bisect_versions
    from tfrepro.trials.envs import detect_tf_dist

    dist = releases.tf_dist or detect_tf_dist()
    versions, excluded, notes = expand_versions(tf_versions, dist)
    for n in notes:
        click.echo(f"note: {n}", err=True)
    progress = None if as_json else ProgressLines(click.echo, 14)
    hook = feature_hook(options, then_features, progress) if then_features is not None else None
    releases = replace(releases, tf_dist=dist, excluded=tuple(excluded), then_features=hook)
    on_line = None if as_json else (lambda line: click.echo(f"  {line}", err=True))
    result = bisect_versions(path, versions, options, releases, events=progress, on_line=on_line)
    doc = result.to_dict()
    doc["notes"] = [*notes, *doc.get("notes", [])]
    click.echo(json.dumps(doc) if as_json else versions_answer(result, doc["notes"]))
    return result.exit_code
