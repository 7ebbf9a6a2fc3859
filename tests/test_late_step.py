"""The late step (bisect/ends.py): without --steps the failing configuration
runs until its symptom, and later trials run to a little past its step.
A fake trial runner that honours the settings (no TensorFlow)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.errors import UserError
from tfrepro.project import Manifest, Project
from tfrepro.settings import late_steps
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult

SCRIPT_STEPS = 700  # the script's own length
NAN_AT = 600


def make_project(tmp_path: Path, extra_toml: str = "") -> Project:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    lines = ["x = 0"]
    for f in ("a", "bad", "c"):
        lines += [f"# tfrepro: feature {f} -- {f} on", f"# x += 1  # {f}", "# tfrepro: end"]
    (root / "repro.py").write_text("\n".join(lines) + "\n")
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 50\n" + extra_toml)
    return Project.load(root)


class LateRunner:
    """'bad' makes the loss NaN at step 600; a trial runs `steps` steps, or the
    script's whole length when run until its symptom."""

    def __init__(self) -> None:
        self.seen: list[tuple[tuple[str, ...], object]] = []
        self.lock = threading.Lock()

    def __call__(self, project, enabled, settings, how=TrialOptions()):
        enabled = tuple(sorted(enabled))
        with self.lock:
            self.seen.append((enabled, settings))
        n = SCRIPT_STEPS if settings.until_symptom else min(settings.steps, SCRIPT_STEPS)
        losses = [1.0 / (i + 1) for i in range(n)]
        bad = None
        if "bad" in enabled and n >= NAN_AT:
            losses, bad = losses[: NAN_AT - 1] + [math.nan], NAN_AT
        return TrialResult(
            enabled=enabled,
            losses=tuple(losses),
            first_nonfinite_step=bad,
            mode="fit",
            steps_run=len(losses),
            weights_finite=bad is None,
            key=repr((enabled, settings)),
        )


def test_a_late_nan_is_found_without_steps(tmp_path):
    runner = LateRunner()
    result = bisect(make_project(tmp_path), BisectOptions(), runner=runner)
    assert (result.status.value, result.symptom.value, result.culprits) == ("found", "nan", ("bad",))
    assert result.evidence.late_step["symptom_step"] == NAN_AT
    assert result.evidence.settings.steps == late_steps(NAN_AT, 50) == 660
    explored = [s for _, s in runner.seen if s.until_symptom]
    assert len(explored) == 1 and explored[0].budget_s == 60.0
    # after the failing configuration's run, every trial runs past the NaN's step
    first = next(i for i, (_, s) in enumerate(runner.seen) if s.until_symptom)
    later = [s for _, s in runner.seen[first + 1 :] if not s.save_state_step]
    assert later and all(s.steps == 660 for s in later)
    assert result.evidence.nan_state["step"] == NAN_AT


def test_with_steps_given_the_trials_stay_at_that_length(tmp_path):
    runner = LateRunner()
    result = bisect(make_project(tmp_path), BisectOptions(steps=50), runner=runner)
    assert result.status.value == "none"
    assert not any(s.until_symptom for _, s in runner.seen)
    assert result.evidence.late_step is None


def test_budget_flag_reaches_the_failing_run_and_is_validated(tmp_path):
    runner = LateRunner()
    bisect(make_project(tmp_path), BisectOptions(budget_s=12.5), runner=runner)
    assert [s.budget_s for _, s in runner.seen if s.until_symptom] == [12.5]
    with pytest.raises(UserError, match="budget-s"):
        bisect(make_project(tmp_path / "b"), BisectOptions(budget_s=500.0), runner=runner)


def test_budget_only_in_the_cache_key_of_the_run_until_symptom():
    from tfrepro.settings import TrialSettings

    plain = TrialSettings()
    assert "budget_s" not in plain.to_dict() and "save_state_step" not in plain.to_dict()
    assert TrialSettings(until_symptom=True).to_dict()["budget_s"] == 60.0


@pytest.mark.parametrize(
    "toml, message",
    [
        ("budget_s = 0\n", "budget_s must be positive"),
        ("budget_s = 400\n", "must be less than timeout_s"),
        ("timeout_s = 20\nbudget_s = 30\n", "must be less than timeout_s"),
        ('budget_s = "long"\n', "budget_s"),
    ],
)
def test_manifest_budget_is_validated(toml, message):
    with pytest.raises(UserError, match=message):
        Manifest.parse("[trial]\n" + toml)


def test_manifest_budget_defaults_below_a_short_timeout():
    assert Manifest.parse("[trial]\ntimeout_s = 30\n").trial.budget_s == 15.0
    assert Manifest.parse("[trial]\nbudget_s = 9\n").trial.budget_s == 9.0


def test_late_steps_margin():
    assert late_steps(40, 50) == 50
    assert late_steps(51, 50) == 56
    assert late_steps(600, 50) == 660


def test_a_longer_run_is_judged_on_memory_within_the_steps():
    from tfrepro.bisect.ends import within_steps

    long = TrialResult(steps_run=700, rss_per_step=tuple(100 + i for i in range(700)), peak_rss_bytes=800)
    cut = within_steps(long, 50)
    assert (len(cut.rss_per_step), cut.peak_rss_bytes, cut.steps_run) == (50, 149, 50)
    strided = TrialResult(
        steps_run=700, rss_per_step=(1, 2, 3, 4, 5, 6, 7), peak_rss_bytes=7, extra={"memory": {"stride": 100}}
    )
    assert within_steps(strided, 250).rss_per_step == (1, 2, 3)
    short = TrialResult(steps_run=40, rss_per_step=(1, 2), peak_rss_bytes=9)
    assert within_steps(short, 50) is short


class SlowTailRunner(LateRunner):
    """The run until its symptom (the script's whole length) reaches the
    trial's time limit at step 400, before the NaN at 600, as on a loaded
    machine; capped trials finish: no symptom within the steps compared."""

    def __call__(self, project, enabled, settings, **kw):
        got = super().__call__(project, enabled, settings, **kw)
        if not settings.until_symptom:
            return got
        from dataclasses import replace

        return replace(
            got, losses=got.losses[:400], steps_run=400, timed_out=True, first_nonfinite_step=None, weights_finite=True
        )


def test_a_timeout_after_the_steps_in_the_run_until_symptom_is_not_a_symptom(tmp_path):
    result = bisect(make_project(tmp_path), BisectOptions(), runner=SlowTailRunner())
    assert result.status.value == "none", result.to_dict().get("error")
    long = TrialResult(steps_run=400, timed_out=True, losses=(1.0,) * 400)
    assert within_steps_view(long, 50).timed_out is False
    assert within_steps_view(TrialResult(steps_run=30, timed_out=True), 50).timed_out is True  # within: a timeout


def within_steps_view(result, steps):
    from tfrepro.bisect.ends import within_steps

    return within_steps(result, steps)
