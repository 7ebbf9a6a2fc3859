"""report.json written before the report read trials and timing through the
writers' own values (TrialResult.from_dict, TimingRecord): the same document
still reads back, field for field, and is written back unchanged."""

from __future__ import annotations

import math

from tfrepro.report.answer import Report, timed
from tfrepro.report.issue_text import _slowdown, log_output

TRACEBACK = 'Traceback (most recent call last):\n  File "repro.py", line 3\nValueError: boom'
# report.json as 3d1cb63 wrote it, abridged: trial summaries are trials/values.py
# `summary` (losses with null, the derived median_step_time, first_loss,
# last_loss, nonfinite), timing is `TimingOutcome.to_dict`.
OLD = {
    "tfrepro_version": "0.9.0",
    "run_id": "20261204-101010",
    "status": "found",
    "symptom": "slowdown",
    "culprits": ["xla"],
    "baseline": {
        "enabled": [],
        "label": "",
        "losses": [1.0, 0.5, 0.25, 0.2, 0.1],
        "step_times": [0.5, 0.02, 0.02, 0.01, 0.01],
        "first_nonfinite_step": None,
        "weights_finite": True,
        "crashed": False,
        "steps_run": 5,
        "wall_s": 2.5,
        "extra": {},
        "median_step_time": 0.01,
        "first_loss": 1.0,
        "last_loss": 0.1,
        "nonfinite": False,
    },
    "culprit_trial": {
        "enabled": ["xla"],
        "losses": [1.0, None],
        "step_times": [0.5, 0.04, 0.04, 0.03, 0.03, 0.9, 0.05, 0.05],
        "first_nonfinite_step": 2,
        "crashed": True,
        "error": "ValueError: boom",
        "steps_run": 8,
        "extra": {"timed_ranges": [[3, 5], [6, 8]], "error_detail": TRACEBACK},
        "median_step_time": 0.04,
        "first_loss": 1.0,
        "last_loss": None,
        "nonfinite": True,
    },
    "evidence": {
        "trials": 9,
        "timing": {
            "statistic": "per trial: ...",
            "baseline": [0.01, 0.011, 0.01],
            "candidate": [0.03, 0.031, 0.03],
            "pairs": [{"baseline": 0.01, "candidate": 0.03, "quiet": True}] * 3,
            "new_pairs": 3,
            "p_value": 0.125,
            "ratio": 3.0,
            "fast": True,
            "conclusive": True,
            "verdict": "slowdown",
        },
    },
    "reproduction": {
        "symptom": "slowdown",
        "reproduced": True,
        "detail": "median step time 3.00x that of reference.py",
        "verdict": "slowdown",
        "candidate": {"losses": [1.0], "step_times": [0.5, 0.03, 0.03, 0.03], "error": "RuntimeError: late"},
        "reference": {"losses": [1.0], "step_times": [0.5, 0.01, 0.01, 0.01]},
        "timing": {"baseline": [0.01], "candidate": [0.03], "pairs": [{}], "ratio": 3.0, "verdict": "slowdown"},
    },
}


def test_an_old_report_json_reads_back_as_the_trials_and_timing_it_wrote():
    r = Report.of(OLD)
    assert r.base.losses == (1.0, 0.5, 0.25, 0.2, 0.1) and r.base.steps_run == 5 and r.base.wall_s == 2.5
    assert r.base.median_step_time() == OLD["baseline"]["median_step_time"]
    cand = r.culprit
    assert cand.losses[0] == 1.0 and math.isnan(cand.losses[1]) and cand.first_nonfinite_step == 2
    assert cand.median_step_time() == OLD["culprit_trial"]["median_step_time"]  # its timed ranges, as written
    assert (cand.crashed, cand.error, cand.error_detail) == (True, "ValueError: boom", TRACEBACK)
    got = timed(r.evidence)
    assert (got.baseline, got.candidate, len(got.pairs)) == ([0.01, 0.011, 0.01], [0.03, 0.031, 0.03], 3)
    assert (got.ratio, got.p_value, got.fast, got.verdict) == (3.0, 0.125, True, "slowdown")
    assert r.rerun.trial.error == "RuntimeError: late" and timed(r.rerun).candidate == [0.03]
    assert timed(r.rerun).fast is None  # a key the document lacks reads as None, as before


def test_an_old_report_json_is_written_back_unchanged_and_says_the_same():
    r = Report.of(OLD)
    doc = r.json()
    for key in ("baseline", "culprit_trial"):
        assert doc[key] == OLD[key]
    assert doc["evidence"]["timing"] == OLD["evidence"]["timing"]
    assert doc["reproduction"] == OLD["reproduction"]
    cur, _ = _slowdown(r, "With xla")
    assert "10.00 ms" in cur and "30.00 ms" in cur and "3 clear-cut interleaved pairs" in cur
    assert TRACEBACK.splitlines()[-1] in log_output(r) and "RuntimeError: late" in log_output(r)
