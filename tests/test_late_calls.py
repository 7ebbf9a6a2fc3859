"""Calls a capped trial never starts (bisect/ends.py `later_calls_steps`):
the wild save-and-load case's fit#1 is 64 steps, so 50-step trials never
reached fit#2, where its slow checkpoint callback runs. Once the failing
configuration's run until its symptom shows such calls, every later trial
runs far enough to reach them. A fake runner that honours the settings."""

from __future__ import annotations

import threading
from pathlib import Path

from tfrepro.bisect.ends import later_calls_steps
from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.project import Project
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult

FIT1, FIT2 = 64, 96  # steps of each fit: fit#1 alone is past the 50-step cap


def calls(n: int) -> list[dict]:
    out = [{"call": "fit#1", "where": "train.py:10", "start": 0}]
    return out + ([{"call": "fit#2", "where": "train.py:20", "start": FIT1}] if n > FIT1 else [])


def make_project(tmp_path: Path) -> Project:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    lines = ["x = 0"]
    for f in ("a", "b"):
        lines += [f"# tfrepro: feature {f} -- {f} on", f"# x += 1  # {f}", "# tfrepro: end"]
    (root / "repro.py").write_text("\n".join(lines) + "\n")
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 50\n")
    return Project.load(root)


class TwoFits:
    def __init__(self) -> None:
        self.seen: list = []
        self.lock = threading.Lock()

    def __call__(self, project, enabled, settings, how=TrialOptions()):
        with self.lock:
            self.seen.append(settings)
        n = FIT1 + FIT2 if settings.until_symptom else min(settings.steps, FIT1 + FIT2)
        return TrialResult(
            enabled=tuple(sorted(enabled)),
            losses=tuple(1.0 / (i + 1) for i in range(n)),
            step_times=(0.01,) * n,
            mode="fit",
            steps_run=n,
            weights_finite=True,
            extra={"calls": calls(n)},
            key=repr((tuple(sorted(enabled)), settings)),
        )


def test_later_calls_steps():
    run = TrialResult(steps_run=FIT1 + FIT2, extra={"calls": calls(FIT1 + FIT2)})
    assert later_calls_steps(run, 50) == FIT1 + 50  # fit#2 gets its own 50 steps
    assert later_calls_steps(run, 100) is None  # fit#2 starts within the steps
    short = TrialResult(steps_run=FIT1 + 10, extra={"calls": calls(FIT1 + 10)})
    assert later_calls_steps(short, 50) == FIT1 + 10  # no further than the run went
    assert later_calls_steps(TrialResult(steps_run=40, extra={"calls": calls(40)}), 50) is None


def test_trials_after_the_failing_run_reach_its_later_calls(tmp_path):
    runner = TwoFits()
    result = bisect(make_project(tmp_path), BisectOptions(), runner=runner)
    first = next(i for i, s in enumerate(runner.seen) if s.until_symptom)
    later = [s for s in runner.seen[first + 1 :] if not s.until_symptom]
    assert later and all(s.steps == FIT1 + 50 for s in later)
    assert result.evidence.settings.steps == FIT1 + 50


def test_with_steps_given_the_trials_stay_at_that_length(tmp_path):
    runner = TwoFits()
    bisect(make_project(tmp_path), BisectOptions(steps=50), runner=runner)
    assert all(s.steps == 50 and not s.until_symptom for s in runner.seen)


class OffBreaksBetweenCalls(TwoFits):
    """With feature `a` off the script crashes between the fits (it reads
    back a checkpoint that `a`, the callback, would have written)."""

    def __call__(self, project, enabled, settings, **kw):
        result = super().__call__(project, enabled, settings, **kw)
        if "a" in enabled or result.steps_run <= FIT1:
            return result
        from dataclasses import replace

        return replace(
            result,
            losses=result.losses[:FIT1],
            step_times=result.step_times[:FIT1],
            steps_run=FIT1,
            crashed=True,
            exit_code=1,
            error="FileNotFoundError: training_1",
            extra={"calls": calls(FIT1)},
        )


def test_a_baseline_that_crashes_between_the_calls_goes_back_to_the_old_steps(tmp_path):
    runner = OffBreaksBetweenCalls()
    result = bisect(make_project(tmp_path), BisectOptions(), runner=runner)
    assert result.status.value != "baseline-fails"
    assert result.evidence.settings.steps == 50
    assert "not measured" in result.evidence.late_step["later_calls"]
    assert "FileNotFoundError" in result.evidence.late_step["later_calls"]
