"""Issue 26: every training call is a step source (trials/classify.py's training calls, the
timing budget per call in inside/memory.py), pure, no TensorFlow."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import tfrepro
from tfrepro.settings import WARMUP_STEPS, TrialSettings
from tfrepro.trials.classify import calls_of, per_call_ratios, slower_calls, symptom_call
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

W = WARMUP_STEPS


def trial(per_call: list[float], n: int = 12, **kw) -> TrialResult:
    """A trial of len(per_call) fits of n steps each, call i's steps taking per_call[i] s."""
    times, calls = [], []
    for i, dt in enumerate(per_call):
        calls.append({"call": f"fit#{i + 1}", "where": f"train.py:{10 * (i + 1)}", "start": len(times)})
        times += [0.5] + [dt] * (n - 1)  # a traced first step, then steady ones
    return TrialResult(step_times=tuple(times), steps_run=len(times), extra={"calls": calls}, **kw)


def test_calls_carry_their_step_ranges_and_file_line():
    t = trial([0.01, 0.01, 0.2])
    assert [(c.tag, c.start, c.end) for c in calls_of(t)] == [("fit#1", 0, 12), ("fit#2", 12, 24), ("fit#3", 24, 36)]
    at = [symptom_call(replace(t, first_nonfinite_step=s), Verdict.NAN) for s in (25, 12)]
    assert at == ["fit#3 (train.py:30)", "fit#1 (train.py:10)"]


def test_a_later_call_slower_is_chosen_for_timing_and_the_first_alone_is_not():
    base = [trial([0.01, 0.01, 0.01, 0.01])] * 2
    slow_late = [trial([0.01, 0.01, 0.01, 0.5])]
    assert slower_calls(base, slow_late, 1.06) == ("fit#4",)
    assert per_call_ratios(base, slow_late)["fit#4"] > 40
    assert slower_calls(base, [trial([0.5, 0.01, 0.01, 0.01])], 1.06) == ()  # the default already times fit#1
    assert slower_calls(base, [trial([0.01, 0.5, 0.5, 0.01])], 1.06) == ("fit#2", "fit#3")
    # a loaded machine: the other calls 10-20 % slower, the planted one 50x: only that one
    assert slower_calls(base, [trial([0.012, 0.011, 0.5, 0.01])], 1.06) == ("fit#3",)
    # a uniform slowdown: every call
    assert slower_calls(base, [trial([0.02, 0.021, 0.02, 0.019])], 1.06) == ("fit#1", "fit#2", "fit#3", "fit#4")
    assert slower_calls([trial([0.01])], [trial([0.5])], 1.06) == ()  # one call: as before


def test_the_answer_names_the_call_where_the_symptom_shows():
    nan = trial([0.01, 0.01], first_nonfinite_step=15)
    assert symptom_call(nan, Verdict.NAN) == "fit#2 (train.py:20)"
    assert symptom_call(trial([0.01, 0.5, 0.5]), Verdict.SLOWDOWN, ("fit#3",)) == "fit#3 (train.py:30)"
    assert symptom_call(trial([0.01]), Verdict.NAN) is None  # one call: nothing to name


def test_steady_steps_of_a_timing_trial_are_the_timed_ranges():
    t = TrialResult(step_times=(1.0, 2.0, 3.0, 4.0, 5.0), extra={"timed_ranges": [[1, 2], [3, 5]]})
    assert t.steady_step_times() == (2.0, 4.0, 5.0)
    assert TrialResult(step_times=tuple(range(W + 2))).steady_step_times() == (W, W + 1)


def test_timed_calls_enter_the_cache_key_only_for_timing_trials_that_set_them():
    plain = TrialSettings()
    assert "timed_calls" not in plain.to_dict()
    timed = plain.timed()
    assert "timed_calls" not in timed.to_dict()
    chosen = TrialSettings(timed_calls=("fit#3",)).timed()
    assert chosen.to_dict()["timed_calls"] == ["fit#3"]
    assert TrialSettings.from_dict(chosen.to_dict()) == chosen


def _budget_module():
    path = Path(tfrepro.__file__).parent / "inside" / "memory.py"
    spec = importlib.util.spec_from_file_location("_t_budget", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_timing_budget_counts_only_the_timed_calls_each_with_its_warm_up():
    Budget = _budget_module().Budget
    b = Budget({"steps_max": 1000, "min_time_s": 1.0, "min_steps": 5, "warmup": 2, "timed_calls": ["fit#2"]})
    b.begin_call("fit#1")
    assert not any(b.step(10.0) for _ in range(8))  # fit#1: not timed, never ends the trial
    assert not b.call_ended("fit#1")
    b.begin_call("fit#2")
    spent = [b.step(0.3) for _ in range(7)]
    assert spent == [False] * 6 + [True]  # 2 warm-up steps, then 5 steady 0.3 s steps (>= 1 s)
    assert b.ranges == [[10, 15]] and b.call_ended("fit#2")
    extra = {}
    b.finish(extra)
    assert extra["timed_ranges"] == [[10, 15]]


def test_without_timed_calls_the_budget_is_as_before():
    Budget = _budget_module().Budget
    b = Budget({"steps_max": 1000, "min_time_s": 0.1, "min_steps": 3, "warmup": 2})
    b.begin_call("fit#1")
    assert [b.step(0.05) for _ in range(5)] == [False] * 4 + [True]
    assert b.call_ended("fit#1") and b.ranges == []


def test_a_zero_edit_variant_line_is_named_as_the_users_file_line():
    from tfrepro.trials.classify import original_line, where_mapper

    original = "a = 1\nmodel.fit(x, callbacks=[Cb()])\nb = 2\nmodel.fit(\n    y,\n)\n"
    annotated = (
        "a = 1\ncallbacks = []\n# tfrepro: feature callback_cb\ncallbacks.append(Cb())\n# tfrepro: end\n"
        "model.fit(x, callbacks=callbacks)\nb = 2\nmodel.fit(\n    y,\n)\n"
    )
    assert original_line(annotated, original, 6) == 2  # the rewritten fit: the statement it replaces
    assert original_line(annotated, original, 8) == 4  # an unchanged fit further down
    m = where_mapper({"train.py": (annotated, original)})
    assert (m("train.py:8"), m("other.py:8"), m("?")) == ("train.py:4", "other.py:8", "?")
    t = trial([0.01, 0.01], first_nonfinite_step=15)
    assert symptom_call(t, Verdict.NAN, where=lambda w: w.replace("20", "2")) == "fit#2 (train.py:2)"
