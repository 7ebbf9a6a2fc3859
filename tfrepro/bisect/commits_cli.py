"""`tfrepro bisect --good REV --bad REV`: options in, progress and answer out.

The presentation half of commit mode (`commits.py` does the work): progress
lines on stderr as commits are tried, the answer on stdout (or exactly one
JSON object with --json), the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tfrepro.bisect.commits import bisect_commits, load_settings, project_root
from tfrepro.bisect.events import ProgressLines
from tfrepro.errors import UserError
from tfrepro.trials.values import SYMPTOM_ORDER, Verdict


def format_result(result: dict[str, Any]) -> str:
    """The human summary of a commit bisection's result (the tried commits
    are printed as they go, see `run_from_cli`)."""
    head: list[str] = []
    status = result["status"]
    if status == "found":
        c = result["commit"]
        head += [
            f"first bad commit ({result['symptom']}): {c['sha']}",
            f"  {c['subject']}",
            f"  {c['author']}, {c['date']}",
        ]
    elif status == "ambiguous":
        head += [f"{result['symptom']}: the first bad commit is one of:"]
        head += [f"  {c['sha'][:12]}  {c['subject']}" for c in result["candidates"]]
    else:
        head.append(f"{status}: {result.get('message', '')}")
    cached = f", {result['cached_trials']} from cache" if result.get("cached_trials") else ""
    head.append(f"{result['trials']} trials{cached}, {result['wall_s']:.1f} s; run: {result['run_dir']}")
    return "\n".join(head)


def run_from_cli(
    path: str | Path,
    good: str | None,
    bad: str | None,
    *,
    symptom: str | None = None,
    as_json: bool = False,
    steps: int | None = None,
    timeout_s: float | None = None,
    use_cache: bool = True,
    echo: Callable[..., None] | None = None,
    executor: str = "local",
    address: str | None = None,
    jobs: int = 1,
    timing_budget: float | None = None,
) -> int:
    """What `tfrepro bisect --good REV --bad REV` does; returns the exit code
    (Contract 4: 0 found, 1 the ends do not hold or an error, 3 none, 4
    ambiguous). Bad input raises UserError (exit 2); Ctrl-C propagates."""
    import click

    echo = echo or click.echo
    if not good or not bad:
        raise UserError(
            "commit mode needs both --good REV and --bad REV", hint="e.g. tfrepro bisect --good v1.2 --bad HEAD"
        )
    target = None
    if symptom:
        try:
            target = Verdict(symptom)
        except ValueError:
            target = None
        if target is None or target not in SYMPTOM_ORDER:
            raise UserError(f"unknown symptom {symptom!r}", hint="one of: " + ", ".join(v.value for v in SYMPTOM_ORDER))
    settings, symptoms = load_settings(project_root(path)[0])
    if steps is not None:
        settings = replace(settings, steps=steps)
    if timeout_s is not None:
        settings = replace(settings, timeout_s=float(timeout_s))
    from tfrepro.trials.executors import make_executor

    runs_on = make_executor(executor, jobs=jobs, address=address, log=lambda text: echo(text, err=True))
    try:
        result = bisect_commits(
            path,
            good,
            bad,
            symptom=target,
            settings=settings,
            symptoms=symptoms,
            use_cache=use_cache,
            events=None if as_json else ProgressLines(echo, 12),
            executor=runs_on,
            timing_budget_s=timing_budget,
        )
    finally:
        runs_on.close()
    doc = result.to_dict()
    echo(json.dumps(doc) if as_json else format_result(doc))
    return result.exit_code
