"""`tfrepro bisect --good REV --bad REV` and `--tf-versions A,B,...`: progress
and answer on the terminal.

The presentation of the range modes (`bisect/commits.py` and
`bisect/versions.py` do the work): progress lines on stderr as points are
tried (the versions expanded, environment builds), the answer on stdout (or
exactly one JSON object with --json, printed by the `bisect` command as
every mode's is); the result they return carries the exit code (Contract 4:
0 found, 1 the ends do not hold or an error, 3 none, 4 ambiguous) and the run
dir. Bad input raises UserError (exit 2); Ctrl-C propagates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import click

from tfrepro.bisect.commits import CommitFields, bisect_commits
from tfrepro.bisect.events import ProgressLines
from tfrepro.bisect.options import BisectOptions
from tfrepro.bisect.ranges import RangeEvidence
from tfrepro.bisect.versions import Releases, ThenFeatures, VersionFields, feature_hook
from tfrepro.errors import UserError
from tfrepro.trials.values import RunResult


def _evidence(result: RunResult) -> RangeEvidence | None:
    return result.evidence if isinstance(result.evidence, RangeEvidence) else None


def _answer(result: RunResult, found: list[str] | None, ambiguous: list[str], rows: Iterable[str] = ()) -> str:
    """A range answer: `found` when the bisection found one (None: nothing
    to name), `ambiguous` when ambiguous, else the status and why; then
    `rows`, then the cost: trials, cache hits, wall time, run dir."""
    ev, status = _evidence(result), result.status.value
    if status == "found" and found is not None:
        head = found
    else:
        head = ambiguous if status == "ambiguous" else [f"{status}: {ev.message if ev and ev.message else ''}"]
    cached = f", {ev.cached_trials} from cache" if ev is not None and ev.cached_trials else ""
    return "\n".join([*head, *rows, f"{result.trials} trials{cached}, {result.wall_s:.1f} s; run: {result.run_dir}"])


def commits_answer(result: RunResult) -> str:
    """The human summary of a commit bisection (the tried commits are
    printed as they go, see `run_commits`)."""
    ev, symptom = _evidence(result), result.symptom.value if result.symptom is not None else None
    c = ev.mode.commit if ev is not None and isinstance(ev.mode, CommitFields) else None
    found = (
        None if c is None else [f"first bad commit ({symptom}): {c.sha}", f"  {c.subject}", f"  {c.author}, {c.date}"]
    )
    ambiguous = [f"{symptom}: the first bad commit is one of:"]
    ambiguous += [f"  {d['sha'][:12]}  {d['subject']}" for d in result.candidates]
    return _answer(result, found, ambiguous)


def run_commits(
    path: str | Path,
    good: str | None,
    bad: str | None,
    options: BisectOptions = BisectOptions(),
    *,
    as_json: bool = False,
    echo: Callable[..., None] = click.echo,
) -> tuple[RunResult, str]:
    """What `tfrepro bisect --good REV --bad REV` does (`options`: the
    symptom, --steps, the cache, the executor, --timing-budget): progress;
    returns the result (its run dir, its exit code) and the answer to print
    (the JSON object with `as_json`)."""
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
    return result, json.dumps(result.to_dict()) if as_json else commits_answer(result)


def versions_answer(result: RunResult, notes: list[str]) -> str:
    """The human summary of a version bisection: the answer, then one line
    per release, the `notes`, the cost."""
    ev, symptom = _evidence(result), result.symptom.value if result.symptom is not None else None
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
    lines = []
    for row in mode.versions if mode is not None else ():
        what = row.verdict if row.verdict in ("ok", "not tried", "untestable", "excluded") else "BAD"
        shows = f" [{', '.join(row.shows)}]" if row.shows else ""
        keras = f"  keras {row.keras}" + (" (tf_keras)" if row.keras_lib == "tf_keras" else "") if row.keras else ""
        note = f"  {row.note}" if row.note else ""
        lines.append(f"  {row.version:<14} {what:<10}{shows}{keras}{note}")
    return _answer(result, found, ambiguous, [*lines, *(f"note: {n}" for n in notes)])


def run_versions(
    path: str | Path,
    tf_versions: str,
    options: BisectOptions,
    releases: Releases,
    *,
    then_features: ThenFeatures | None,
    as_json: bool,
) -> tuple[RunResult, str]:
    """What `tfrepro bisect --tf-versions ...` does (`options`: the symptom,
    --steps, the cache, --timing-budget; `releases`: the ends, --keras,
    --tf-dist): progress; returns the result and the answer to print."""
    from tfrepro.bisect.versions import bisect_versions
    from tfrepro.trials.envs import cache_root, detect_tf_dist
    from tfrepro.trials.releases import expand, list_releases

    dist = releases.tf_dist or detect_tf_dist()
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
    hook = feature_hook(options, then_features, progress) if then_features is not None else None
    releases = replace(releases, tf_dist=dist, excluded=tuple(excluded), then_features=hook)
    on_line = None if as_json else (lambda line: click.echo(f"  {line}", err=True))
    result = bisect_versions(path, versions, options, releases, events=progress, on_line=on_line)
    doc = result.to_dict()
    doc["notes"] = [*notes, *doc.get("notes", [])]
    return result, json.dumps(doc) if as_json else versions_answer(result, doc["notes"])
