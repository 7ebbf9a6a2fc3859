"""`tfrepro bisect --tf-versions A,B,...`: options in, progress and answer out.

The presentation half of version mode (`versions.py` does the work): the
versions expanded (ranges from the package index), environment and trial
progress on stderr, the answer on stdout (or one JSON object), the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tfrepro.bisect.events import BisectEvents, ProgressLines, cost_line
from tfrepro.bisect.options import BisectOptions
from tfrepro.bisect.versions import FeatureAnswer, FeatureHook, FeatureStart, Releases


def expand_versions(spec: str, tf_dist: str) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """`--tf-versions` -> (versions, excluded with reasons, notes); the index is
    asked only for ranges."""
    from tfrepro.trials.envs import cache_root
    from tfrepro.trials.releases import expand, list_releases

    notes: list[str] = []

    def listing():
        got = list_releases(tf_dist, cache_root())
        if got.stale:
            notes.append(f"the package index is unreachable: using the {tf_dist} release list cached earlier")
        return got

    versions, excluded = expand(spec, listing)
    return versions, excluded, notes


@dataclass(frozen=True)
class ThenFeatures:
    """`--then-features` and the features it bisects (`--only`, `--skip`: comma lists)."""

    only: str | None = None
    skip: str | None = None


def _feature_hook(options: BisectOptions, chosen: ThenFeatures, events: BisectEvents | None) -> FeatureHook:
    """`--then-features`: a feature bisection of the project inside the first
    bad release's environment (--steps, the cache and --timing-budget of
    `options`); its answer goes under `then_features`."""

    def hook(start: FeatureStart) -> FeatureAnswer:
        from tfrepro.bisect.engine import bisect
        from tfrepro.project import Project

        names = lambda v: [x.strip() for x in (v or "").split(",") if x.strip()]  # noqa: E731
        only, skip = names(chosen.only) or None, names(chosen.skip) or None
        project = Project.load(start.project_root, only=only, skip=skip)
        if events is not None:
            events.phase(f"bisecting the features inside tensorflow {start.version}")
        inside = BisectOptions(
            steps=options.steps, use_cache=options.use_cache, timing_budget_s=options.timing_budget_s
        )
        r = bisect(project, inside, runner=start.runner(), events=events)
        return FeatureAnswer(
            status=r.status.value,
            symptom=r.symptom.value if r.symptom is not None else None,
            culprits=sorted(r.culprits),
            trials=r.trials,
            run_dir=r.run_dir,
            error=r.error,
        )

    return hook


def format_result(result: dict[str, Any]) -> str:
    """The human summary: the answer, then one line per release."""
    lines: list[str] = []
    if result["status"] == "found":
        lines.append(
            f"first bad version ({result['symptom']}): {result['first_bad_version']}"
            f"  (last good: {result['last_good_version']})"
        )
        then = result.get("then_features")
        if then:
            inside = (
                f"and only with {' + '.join(then['culprits'])} on"
                if then.get("culprits")
                else f"feature bisect inside it: {then.get('status')}"
            )
            lines.append(f"  {inside} (run: {then.get('run_dir')})")
        if result.get("follows_note"):
            lines.append(f"  follows {result['follows']}: {result['follows_note']}")
    elif result["status"] == "ambiguous":
        lines.append(f"{result['symptom']}: the first bad version is one of {', '.join(result['candidates'])}")
    else:
        lines.append(f"{result['status']}: {result.get('message', '')}")
    for row in result["versions"]:
        what = row["verdict"] if row["verdict"] in ("ok", "not tried", "untestable", "excluded") else "BAD"
        shows = f" [{', '.join(row['shows'])}]" if row["shows"] else ""
        keras = (
            f"  keras {row['keras']}" + (" (tf_keras)" if row.get("keras_lib") == "tf_keras" else "")
            if row.get("keras")
            else ""
        )
        note = f"  {row['note']}" if row.get("note") else ""
        lines.append(f"  {row['version']:<14} {what:<10}{shows}{keras}{note}")
    lines += [f"note: {n}" for n in result.get("notes", [])]
    lines.append(cost_line(result))
    return "\n".join(lines)


def run_from_cli(
    path: str | Path,
    tf_versions: str,
    options: BisectOptions = BisectOptions(),
    releases: Releases = Releases(),
    *,
    then_features: ThenFeatures | None = None,
    as_json: bool = False,
    echo: Callable[..., None] | None = None,
) -> int:
    """What `tfrepro bisect --tf-versions ...` does (`options`: the symptom,
    --steps, the cache, --timing-budget; `releases`: the ends, --keras,
    --tf-dist); returns the exit code (Contract 4: 0 found, 1 the ends do
    not hold or an error, 3 none, 4 ambiguous). Bad input raises UserError (exit 2)."""
    import click

    from tfrepro.bisect.versions import bisect_versions
    from tfrepro.trials.envs import detect_tf_dist

    echo = echo or click.echo
    dist = releases.tf_dist or detect_tf_dist()
    versions, excluded, notes = expand_versions(tf_versions, dist)
    for n in notes:
        echo(f"note: {n}", err=True)
    progress = None if as_json else ProgressLines(echo, 14)
    hook = _feature_hook(options, then_features, progress) if then_features is not None else None
    releases = replace(releases, tf_dist=dist, excluded=tuple(excluded), then_features=hook)
    on_line = None if as_json else (lambda line: echo(f"  {line}", err=True))
    result = bisect_versions(path, versions, options, releases, events=progress, on_line=on_line)
    doc = result.to_dict()
    doc["notes"] = [*notes, *doc.get("notes", [])]
    echo(json.dumps(doc) if as_json else format_result(doc))
    return result.exit_code
