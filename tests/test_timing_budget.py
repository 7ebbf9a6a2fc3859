"""The harness's time budget for timing trials, driven step by step (no TF,
no process: the stop is caught instead of leaving the process)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from tfrepro.inside import harness as _harness_pkg_module  # noqa: F401  (the file below)


@pytest.fixture
def harness(tmp_path, monkeypatch):
    path = os.path.join(os.path.dirname(_harness_pkg_module.__file__), "harness.py")
    spec = importlib.util.spec_from_file_location("_tfrepro_harness_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Stopped(Exception):
        pass

    def stop(reason):
        raise Stopped(reason)

    monkeypatch.setattr(module, "_stop", stop)
    module.Stopped = Stopped

    def start(**config):
        module.S = module._State({"result_path": str(tmp_path / "result.json"), **config})
        if config.get("steps_max"):
            monkeypatch.delenv("REPRO_STEPS", raising=False)
            module.S.budget = module._sibling_file("memory").Budget(module.S.config)
            assert os.environ["REPRO_STEPS"] == str(config["steps_max"])
        return module

    return start


def run_steps(h, dts, loss=1.0):
    """Feed steps until the harness stops; returns (steps taken, reason)."""
    for i, dt in enumerate(dts, 1):
        try:
            h.record_step(loss, dt)
        except h.Stopped as e:
            return i, str(e)
    return len(dts), None


def test_ordinary_trials_stop_at_steps(harness):
    h = harness(steps=50)
    assert run_steps(h, [0.002] * 500) == (50, "steps")


def test_timing_trials_stop_when_both_the_time_and_the_steps_are_in(harness):
    budget = dict(steps=50, steps_max=5000, min_time_s=1.0, min_steps=30, warmup=3)
    # 2 ms steps: 1 s of steady steps is 500 of them, past the 3 warm-up steps
    assert run_steps(harness(**budget), [0.5] * 3 + [0.002] * 5000) == (503, "budget")
    # 100 ms steps: the time is in after 10, the 30 steady steps decide
    assert run_steps(harness(**budget), [0.5] * 3 + [0.1] * 100) == (33, "budget")
    # steps_max bounds it
    assert run_steps(harness(**{**budget, "steps_max": 200}), [0.001] * 5000) == (200, "budget")
    # a very slow step: 5x the time budget with 5 steady steps is enough
    assert run_steps(harness(**budget), [0.5] * 3 + [2.0] * 100) == (8, "budget")


def test_a_timing_trial_measures_the_contention_of_its_steady_steps(harness, monkeypatch):
    """others_cpu: the machine's busy CPU time less the trial's own, over the
    wall time of the steady steps, per CPU; from readings (wall, ours, busy)
    taken when the warm-up ends and at the finish (an injected /proc/stat)."""
    h = harness(steps=50, steps_max=5000, min_time_s=0.05, min_steps=5, warmup=3)
    clock = h.S.budget.step.__globals__  # the memory module's globals
    monkeypatch.setattr(clock["os"], "cpu_count", lambda: 4)
    reading = [(0.0, 0.0, 0.0)]
    monkeypatch.setitem(clock, "_cpu_now", lambda: reading[0])
    reading[0] = (5.0, 1.0, 3.0)  # seen during the warm-up: must not count
    run_steps(h, [0.5] * 2)
    reading[0] = (10.0, 2.0, 6.0)  # the warm-up's last step: the window opens
    run_steps(h, [0.5])
    reading[0] = (11.0, 2.5, 7.0)  # mid-window: not read
    assert run_steps(h, [0.02] * 10)[1] == "budget"
    reading[0] = (12.0, 3.0, 9.0)  # the finish: 2 s of wall, 1 s ours, 3 s busy
    extra = {}
    h.S.budget.finish(extra)
    assert extra["others_cpu"] == 0.25  # (3 - 1) / (2 x 4 CPUs)

    reading[0] = (13.0, 6.0, 9.5)  # our own CPU is never someone else's: not below 0
    extra = {}
    h.S.budget.finish(extra)
    assert extra["others_cpu"] == 0.0


def test_no_contention_figure_without_readings(harness, monkeypatch):
    h = harness(steps=50, steps_max=5000, min_time_s=0.05, min_steps=5, warmup=3)
    monkeypatch.setitem(h.S.budget.step.__globals__, "_cpu_now", lambda: None)  # off Linux
    run_steps(h, [0.5] * 3 + [0.02] * 10)
    extra = {}
    h.S.budget.finish(extra)
    assert "others_cpu" not in extra


def test_a_timing_trial_still_stops_at_a_nonfinite_loss(harness):
    h = harness(steps=50, steps_max=5000, min_time_s=1.0, min_steps=30, warmup=3)
    run_steps(h, [0.002] * 10)
    assert run_steps(h, [0.002], loss=float("nan")) == (1, "nonfinite")


def test_the_runner_passes_the_budget_to_the_harness(tmp_path):
    from tfrepro.settings import TrialSettings
    from tfrepro.trials.runner import run_variant

    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "repro.py").write_text("pass\n")
    s = TrialSettings(steps=50, min_time_s=1.5, min_steps=40, steps_max=900)
    run_variant(tmp_path / "v", s, tmp_path / "t")
    config = json.loads((tmp_path / "t" / "trial.json").read_text())
    assert (config["steps_max"], config["min_time_s"], config["min_steps"], config["warmup"]) == (900, 1.5, 40, 3)
    assert s.to_dict()["steps_max"] == 900 and "steps_max" not in TrialSettings().to_dict()
    assert TrialSettings.from_dict(s.to_dict()) == s
