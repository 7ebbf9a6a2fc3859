"""A run's trials as they land in its run dir, in every mode (features,
commits, releases): numbered in the order they finish, each one's record
dir `trials/NNN-<what>-r<repeat>/` (`state.write_trial_record`) and its
`TrialRecord` (the trials table's row, the progress line's event); and the
run's answer, `result.json`, written once at the end with the run's wall
time (from `started`, by default the run dir's making)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace

from tfrepro.bisect.events import TrialRecord
from tfrepro.trials.state import StateDir, shown_path, write_trial_record
from tfrepro.trials.values import Evidence, RunResult, TrialResult, TrialRow


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

    @property
    def cached(self) -> int:
        """How many of the trials came from the trial cache."""
        return sum(1 for r in self.records if r.result.cached)

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
