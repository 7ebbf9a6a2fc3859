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
from tfrepro.errors import UserError
from tfrepro.trials.values import SYMPTOM_ORDER, Verdict


def format_result(result: dict[str, Any]) -> str:
    """The human summary of a commit bisection's result (the tried commits
    are printed as they go, see `run_from_cli`)."""
    head: list[str] = []
    status = result["status"]
    if status == "found" and result.get("first_bad_commit"):
        c = result["commit"]
        head += [f"first bad commit ({result['symptom']}): {c['sha']}",
                 f"  {c['subject']}", f"  {c['author']}, {c['date']}"]
    elif status == "found":
        head += [f"{result['symptom']}: the first bad commit is one of:"]
        head += [f"  {c['sha'][:12]}  {c['subject']}" for c in result["candidates"]]
    else:
        head.append(f"{status}: {result.get('message', '')}")
    cached = f", {result['cached_trials']} from cache" if result.get("cached_trials") else ""
    head.append(f"{result['trials']} trials{cached}, {result['wall_s']:.1f} s; run: {result['run_dir']}")
    return "\n".join(head)


def run_from_cli(
    path: str | Path, good: str | None, bad: str | None, *, symptom: str | None = None,
    as_json: bool = False, steps: int | None = None, timeout_s: float | None = None,
    use_cache: bool = True, echo: Callable[..., None] | None = None,
    executor: str = "local", address: str | None = None,
) -> int:
    """What `tfrepro bisect --good REV --bad REV` does; returns the exit code
    (0 found, 1 the ends do not hold, 130 interrupted). Bad input raises
    UserError (exit 2)."""
    import click

    echo = echo or click.echo
    if not good or not bad:
        raise UserError("commit mode needs both --good REV and --bad REV",
                        hint="e.g. tfrepro bisect --good v1.2 --bad HEAD")
    target = None
    if symptom:
        try:
            target = Verdict(symptom)
        except ValueError:
            target = None
        if target is None or target not in SYMPTOM_ORDER:
            raise UserError(f"unknown symptom {symptom!r}",
                            hint="one of: " + ", ".join(v.value for v in SYMPTOM_ORDER))
    settings, symptoms = load_settings(project_root(path)[0])
    if steps is not None:
        settings = replace(settings, steps=steps)
    if timeout_s is not None:
        settings = replace(settings, timeout_s=float(timeout_s))

    def progress(kind: str, data: dict[str, Any]) -> None:
        if kind == "range":
            echo(f"bisecting {data['commits']} commits: good {data['good']['sha'][:12]} "
                 f"({data['good']['subject']}) .. bad {data['bad']['sha'][:12]} ({data['bad']['subject']})",
                 err=True)
        elif kind == "running":
            again = f" (repeat {data['repeat']})" if data["repeat"] else ""
            echo(f"  running {data['sha'][:12]}{again}...", err=True)
        elif kind == "tried":
            why = f"  ({data['reason']})" if data.get("reason") else ""
            echo(f"  {data['sha'][:12]}  {data['verdict']:<10}  {data['subject']}{why}", err=True)
        elif kind == "symptom":
            echo(f"hunting: {data['symptom']}", err=True)

    runs_on = None
    if executor != "local" or address:
        from tfrepro.trials.executors import make_executor

        runs_on = make_executor(executor, address=address, log=lambda text: echo(text, err=True))
    try:
        result = bisect_commits(path, good, bad, symptom=target, settings=settings, symptoms=symptoms,
                                use_cache=use_cache, on_event=None if as_json else progress,
                                executor=runs_on)
    except KeyboardInterrupt:
        echo("interrupted: finished trials are cached; run the same command again to continue", err=True)
        return 130
    finally:
        if runs_on is not None:
            runs_on.close()
    if as_json:
        echo(json.dumps(result))
    else:
        echo(format_result(result))
    return 0 if result["status"] == "found" else 1
