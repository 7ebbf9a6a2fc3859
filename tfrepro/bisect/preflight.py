"""Preflight: the baseline (every feature OFF) must run before a bisect.

An OFF part that compiles can still break code further down: a callback
object used after `fit`, a layer looked up by name, a strategy whose scope
is used later. Annotated blocks (zero-edit or `annotate --write`) are only
checked to compile, so the engine calls `preflight` on its baseline trial
first. When that trial crashes:

1. suspects first: blocks whose ON part mentions the name of a NameError /
   UnboundLocalError / AttributeError, then every other feature;
2. each suspect ON alone in the baseline: the first that makes the baseline
   run is dropped (kept ON in every variant, no longer a candidate); one
   that only changes the crash is dropped too and the search goes on (two
   broken OFF parts), for a few rounds;
3. if no combination runs, nothing is dropped and the engine reports
   `baseline-fails` as before (the baseline is broken on its own).

Every drop says which feature and why (`dropped_features: [{name, reason}]`).
Pure logic over an injected `run(project) -> TrialResult`: tested with fakes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfrepro.trials.trial import Purpose
from tfrepro.trials.values import TrialResult

RunBaseline = Callable[[Any], TrialResult]
_NAME_RE = re.compile(r"(?:NameError|UnboundLocalError)\b.*?'(?P<name>[A-Za-z_]\w*)'")
_ATTR_RE = re.compile(r"AttributeError\b.*?attribute '(?P<name>[A-Za-z_]\w*)'")
_QUOTED_RE = re.compile(r"['\"](?P<name>[A-Za-z_]\w*)['\"]")


@dataclass
class PreflightResult:
    project: Any  # the project to bisect (features dropped, if any)
    baseline: TrialResult  # its baseline trial (the last one run)
    dropped: list[dict[str, str]] = field(default_factory=list)
    trials: int = 0


def broken(result: TrialResult) -> bool:
    """A crash of the baseline that a feature's OFF part may cause."""
    return result.crashed and not result.timed_out and not result.could_not_run


def suspects(project: Any, error: str | None) -> list[str]:
    """Candidate features, the likeliest culprits of `error` first."""
    names = list(project.feature_names)
    words: list[str] = []
    for rx in (_NAME_RE, _ATTR_RE, _QUOTED_RE):
        words += [m.group("name") for m in rx.finditer(error or "")]
    if not words:
        return names
    score: dict[str, int] = {}
    for rel, src in project.sources.items():
        for b in src.blocks:
            if b.name not in names:
                continue
            text = "".join(src.lines[b.on_part[0] : b.on_part[1]])
            hits = sum(1 for w in words if re.search(rf"\b{re.escape(w)}\b", text))
            score[b.name] = max(score.get(b.name, 0), hits)
    return sorted(names, key=lambda n: (-score.get(n, 0), names.index(n)))


def _reason(error: str | None, fixed: bool) -> str:
    what = error or "it crashes"
    if fixed:
        return f"its OFF part breaks the baseline ({what}); kept ON, not a candidate"
    return f"its OFF part breaks the baseline ({what}; the baseline still crashes further on); kept ON"


def preflight(project: Any, run: RunBaseline, *, max_rounds: int = 3) -> PreflightResult:
    """Run the baseline of `project`; when it crashes, find and drop the
    features whose OFF part breaks it (see the module docstring)."""
    first = run(project)
    trials = 1
    if not broken(first) or not project.feature_names:
        return PreflightResult(project, first, [], trials)
    current, result, dropped = project, first, []
    for _ in range(max_rounds):
        changed = None
        for name in suspects(current, result.error):
            trial = current.exclude({name: "preflight"})
            got = run(trial)
            trials += 1
            if not broken(got):
                dropped.append({"name": name, "reason": _reason(result.error, True)})
                kept_on = project.exclude({d["name"]: "preflight: " + d["reason"] for d in dropped})
                return PreflightResult(kept_on, got, dropped, trials)
            if changed is None and got.error != result.error:
                changed = (name, got)
        if changed is None:
            break
        name, got = changed
        dropped.append({"name": name, "reason": _reason(result.error, False)})
        current, result = current.exclude({name: "preflight"}), got
    return PreflightResult(project, first, [], trials)


def run_preflight(project: Any, executor: Any, request: Any, events: Any) -> PreflightResult:
    """`preflight` with the engine's executor, baseline request and events
    (a phase is announced only when the baseline crashes)."""
    calls: list[Any] = []

    def run(p: Any) -> TrialResult:
        if len(calls) == 1:
            events.phase("preflight: the baseline crashes; looking for a feature whose OFF part breaks it")
        calls.append(p)
        events.trial_started((), Purpose.BASELINE if len(calls) == 1 else Purpose.PREFLIGHT, 0)
        return executor.run_batch(p, [request])[0]

    got = preflight(project, run)
    for d in got.dropped:
        events.phase(f"dropped {d['name']}: {d['reason']}")
    return got
