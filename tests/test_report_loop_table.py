"""ISSUE.md's loop-against-fit table for a custom_loop culprit (report/issue_text.py)."""

from __future__ import annotations

from tfrepro.report.answer import Report
from tfrepro.report.issue_text import first_diverging_rows, series_log


def test_the_first_step_and_the_first_diverging_steps_are_shown():
    loop = [1.0, 0.9, 0.95, 0.97, 0.99]
    fit = [1.0, 0.9, 0.8, 0.7, 0.6]
    rows = first_diverging_rows(loop, fit, 0.05)
    assert "tolerance 0.05" in rows[0]
    steps = [int(r.split()[0]) for r in rows[2:]]
    assert steps == [1, 3, 4, 5]  # step 2 agrees: not shown


def test_agreeing_runs_say_so_and_nan_counts_as_diverging():
    assert "agree within" in first_diverging_rows([1.0, 0.5], [1.0, 0.5], 0.05)[0]
    rows = first_diverging_rows([1.0, None], [1.0, 0.5], 0.05)
    assert rows[-1].split()[:2] == ["2", "NaN"]


def test_the_issue_log_of_a_custom_loop_culprit_holds_the_table():
    doc = {
        "symptom": "mismatch",
        "culprits": ["custom_loop"],
        "symptom_settings": {"mismatch": 0.05},
        "culprit_trial": {"losses": [1.0, 2.0]},
        "baseline": {"losses": [1.0, 1.0]},
    }
    log = "\n".join(series_log(Report.of(doc)))
    assert "first diverging steps, custom loop (repro.py) against fit (reference.py)" in log
    doc["culprits"] = ["mixed_precision"]
    assert "first diverging" not in "\n".join(series_log(Report.of(doc)))
