"""`tfrepro bisect --good REV --bad REV`: options in, progress and answer out.

The presentation half of commit mode (`commits.py` does the work): progress
lines on stderr as commits are tried, the answer on stdout (or exactly one
JSON object with --json), the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfrepro.bisect.commits import bisect_commits
from tfrepro.bisect.events import ProgressLines, cost_line
from tfrepro.bisect.options import BisectOptions
from tfrepro.errors import UserError


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
    head.append(cost_line(result))
    return "\n".join(head)


def run_from_cli(
    path: str | Path,
    good: str | None,
    bad: str | None,
    options: BisectOptions = BisectOptions(),
    *,
    as_json: bool = False,
    echo: Callable[..., None] | None = None,
) -> int:
    """What `tfrepro bisect --good REV --bad REV` does (`options`: the
    symptom, --steps, the cache, the executor, --timing-budget); returns the
    exit code (Contract 4: 0 found, 1 the ends do not hold or an error, 3
    none, 4 ambiguous). Bad input raises UserError (exit 2); Ctrl-C propagates."""
    import click

    echo = echo or click.echo
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
    doc = result.to_dict()
    echo(json.dumps(doc) if as_json else format_result(doc))
    return result.exit_code
