"""What a bisection tells its display while it runs: typed callbacks, the same
for the feature, commit and version bisections (mozregression's
`BisectorHandler`, with values instead of strings)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict


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
