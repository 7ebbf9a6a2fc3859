"""What a bisection tells its display while it runs: typed callbacks, the same
for the feature, commit and version bisections (mozregression's
`BisectorHandler`, with values instead of strings); and what it writes while
it runs, in every mode (features, commits, releases): its trials as they land
in its run dir, numbered in the order they finish, each one's record dir
`trials/NNN-<what>-r<repeat>/` (`state.write_trial_record`) and its
`TrialRecord` (the trials table's row, the progress line's event); and the
run's answer, `result.json`, written once at the end with the run's wall
time (from `started`, by default the run dir's making): `TrialLog`. And its
`BisectOptions` (the flags): feature mode reads every field; commit and
version modes the symptom, steps, cache, executor and timing ones."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tfrepro.errors import UserError
from tfrepro.settings import TIMING_MIN_STEPS, TIMING_MIN_TIME_S, TIMING_STEPS_MAX, WARMUP_STEPS, TrialSettings
from tfrepro.trials.state import StateDir, shown_path, write_trial_record
from tfrepro.trials.values import Evidence, RunResult, TrialResult, TrialRow
from tfrepro.verdicts import SYMPTOM_ORDER, Verdict


def parse_symptom(text: str | None) -> Verdict | None:
    """`--symptom NAME` -> the symptom hunted (None: the first one shown); an
    unknown name is a UserError (exit 2)."""
    if not text:
        return None
    found = next((v for v in SYMPTOM_ORDER if v.value == text), None)
    if found is None:
        raise UserError(f"unknown symptom {text!r}", hint="one of: " + ", ".join(v.value for v in SYMPTOM_ORDER))
    return found


@dataclass(frozen=True)
class BisectOptions:
    """What the user asked for (CLI flags); None means "from tfrepro.toml"."""

    symptom: Verdict | None = None
    strategy: str = "auto"
    steps: int | None = None
    # seconds of training the failing configuration's run until its symptom
    # may take (None: [trial] budget_s); only without `steps`
    budget_s: float | None = None
    repeats: int | None = None
    jobs: int = 1
    use_cache: bool = True
    replays: int = 3  # fresh runs of the culprit (and of the baseline) at the end
    # Slowdown hunts. A pair is one candidate timing trial between two
    # baseline ones; a clear-cut pair decides alone (slowdown.TimingPair.clear).
    timing_min: int = 3  # pairs before the rank test is consulted (it can pass from 5 on)
    timing_max: int = 16  # new pairs per comparison, at most
    timing_replays: int = 1  # fresh pairs the replay adds to the evidence, at least
    timing_budget_s: float = TIMING_MIN_TIME_S  # steady-state seconds a timing trial measures
    timing_min_steps: int = TIMING_MIN_STEPS  # ... and steady steps, at least
    timing_steps_max: int = TIMING_STEPS_MAX  # ... and steps in all, at most
    executor: str = "local"  # where trials run: "local" (`jobs` at a time) or "ray"
    address: str | None = None  # the Ray cluster to join (None: start a local one)
    replicas: int | None = None  # --replicas N: one device split into N logical ones (None: [trial])
    # Why a failing baseline fails: `tfrepro.check.run.checks_for_result`,
    # injected by the CLI (commands never import each other).
    baseline_checks: Callable[..., dict[str, Any]] | None = None

    def trial_settings(self, settings: TrialSettings) -> TrialSettings:
        """The settings of every trial, in every mode: `settings` (`[trial]`)
        with the command-line overrides (--steps, --budget-s, --replicas). A
        --budget-s past the timeout raises UserError."""
        if self.budget_s is not None and self.budget_s >= settings.timeout_s:
            raise UserError(
                f"--budget-s {self.budget_s:g} must be less than the trial timeout "
                f"({settings.timeout_s:g} s, [trial] timeout_s)",
                hint="give a smaller --budget-s, or raise [trial] timeout_s",
            )
        given = {k: v for k in ("steps", "budget_s", "replicas") if (v := getattr(self, k)) is not None}
        return replace(settings, repeat=0, **given)

    def timing_settings(self, settings: TrialSettings) -> TrialSettings:
        """`settings` for a timing trial: a time budget of steady steps, not `steps`."""
        return settings.timed(self.timing_budget_s, self.timing_min_steps, self.timing_steps_max)

    def refuse_short_slowdown(self, settings: TrialSettings) -> None:
        """A slowdown hunt whose trials end within the warm-up steps times nothing: UserError (every mode)."""
        if self.symptom is Verdict.SLOWDOWN and settings.steps < WARMUP_STEPS + 2:
            raise UserError(
                f"a slowdown needs steps past the {WARMUP_STEPS} warm-up steps",
                hint=f"use --steps {WARMUP_STEPS + 10} or more",
            )


@dataclass
class TrialRecord:
    """One trial of a run, as it goes into the run dir and the trials table."""

    index: int
    enabled: tuple[str, ...]
    role: str  # a feature trial's trial.Purpose ("baseline", "search", ...), or a point's "commit <sha12>", "tf <v>"
    repeat: int
    result: TrialResult
    summary: str  # its summary.json, relative to the run dir
    verdict: Verdict | None = None
    live: Verdict | None = None  # what the engine judged when the trial was shown (the progress line)


class TrialLog:
    """The trials of a new run dir in `state`, in the order they were recorded."""

    def __init__(
        self,
        state: StateDir,
        run_id: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ) -> None:
        self.run_dir = state.new_run_dir(run_id)
        self.clock, self.started = clock, clock() if started is None else started
        self.records: list[TrialRecord] = []

    def add(self, enabled: tuple[str, ...], role: str, repeat: int, result: TrialResult, what: str) -> TrialRecord:
        """Number one trial and write its record dir (`what` names the dir)."""
        rel = f"trials/{len(self.records) + 1:03d}-{what}-r{repeat}"
        record = TrialRecord(len(self.records) + 1, enabled, role, repeat, result, f"{rel}/summary.json")
        self.records.append(record)
        write_trial_record(self.run_dir / rel, result)
        return record

    def answer(self, result: RunResult, evidence: Evidence) -> RunResult:
        """`result` with the run's trials, wall time, run dir and `evidence`,
        written to `<run_dir>/result.json` (Contract 4), and returned."""
        result = replace(
            result,
            trials=len(self.records),
            wall_s=round(self.clock() - self.started, 3),
            run_dir=shown_path(self.run_dir),
            evidence=evidence,
        )
        text = json.dumps(result.to_dict(), indent=1, default=str) + "\n"
        (self.run_dir / "result.json").write_text(text, encoding="utf-8")
        return result


def trial_row(record: TrialRecord, verdict: str | None, **label: str) -> TrialRow:
    """One trial in the result's trials table, in every mode (`label`: a
    point's own name for it, `sha=` or `version=`; a point has no feature on)."""
    return TrialRow(
        enabled=list(record.enabled),
        verdict=verdict,
        summary=record.summary,
        cached=record.result.cached,
        role=record.role,
        repeat=record.repeat,
        key=record.result.key,
        **label,  # type: ignore[typeddict-item]
    )


@dataclass(frozen=True)
class PointTried:
    """One point of a range (a commit, a release) judged by the search."""

    label: str  # the commit sha, or the version
    subject: str  # the commit subject, or "tensorflow X"
    verdict: Verdict  # the target when bad, OK when good, UNTESTABLE when skipped
    shows: tuple[Verdict, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict[str, str | list[str]]:
        shows = [v.value for v in self.shows]
        why = {"reason": self.reason} if self.reason else {}
        return {"label": self.label, "subject": self.subject, "verdict": self.verdict.value, "shows": shows, **why}


class BisectEvents:
    """Progress callbacks (no-ops). Called from worker threads too."""

    def phase(self, text: str) -> None: ...

    def trial_started(self, enabled: tuple[str, ...], role: str, repeat: int) -> None: ...

    def trial_finished(self, record: TrialRecord) -> None: ...

    def point_tried(self, point: PointTried) -> None: ...


class ProgressLines(BisectEvents):
    """Progress of a range bisection (commits, releases) as lines on stderr."""

    def __init__(self, echo: Callable[..., None], label_width: int = 12) -> None:
        self.echo, self.width = echo, label_width

    def phase(self, text: str) -> None:
        self.echo(text, err=True)

    def trial_started(self, enabled: tuple[str, ...], role: str, repeat: int) -> None:
        again = f" (repeat {repeat})" if repeat else ""
        self.echo(f"  running {role}{again}...", err=True)

    def point_tried(self, point: PointTried) -> None:
        subject = f"  {point.subject}" if point.subject else ""
        why = f"  ({point.reason})" if point.reason else ""
        label = point.label[: self.width]
        self.echo(f"  {label:<{self.width}}  {point.verdict.value:<10}{subject}{why}", err=True)
