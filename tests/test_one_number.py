"""Issue 26: one number per claim. ISSUE.md quotes the step times and the ratio
from the same timed samples, and a p-value only where it supports the claim."""

from __future__ import annotations

from dataclasses import replace

from tfrepro.bisect.result_doc import FeatureEvidence
from tfrepro.cli.display import answer_lines
from tfrepro.report.answer import Report
from tfrepro.report.issue_text import _slowdown
from tfrepro.trials.slowdown import TimingOutcome, TimingPair
from tfrepro.trials.values import RunResult, Status
from tfrepro.verdicts import Verdict


def _doc(p_value: float, fast: bool = False) -> dict:
    return {
        "culprits": ["callback_slow"],
        "baseline": {"median_step_time": 0.11165},  # an untimed trial's median: not the claim's samples
        "culprit_trial": {"median_step_time": 0.31283},
        "evidence": {
            "timing": {
                "baseline": [0.100, 0.102, 0.098],
                "candidate": [0.210, 0.220, 0.200],
                "pairs": [{}, {}, {}],
                "ratio": 2.1,
                "p_value": p_value,
                "fast": fast,
            }
        },
    }


def test_the_step_times_and_the_ratio_come_from_the_same_samples_and_p_only_when_it_supports():
    cur, _ = _slowdown(Report.of(_doc(0.125)), "With callback_slow")
    assert "210" in cur and "100" in cur and "2.1x" in cur
    assert "312" not in cur and "111" not in cur
    assert "p=" not in cur and "3 interleaved pairs" in cur
    sig, _ = _slowdown(Report.of(_doc(0.01)), "With callback_slow")
    assert "p=0.01" in sig
    fast, _ = _slowdown(Report.of(_doc(0.125, fast=True)), "With callback_slow")
    assert "3 clear-cut interleaved pairs" in fast and "p=" not in fast


def test_the_cli_quotes_p_only_when_it_supports_the_claim():
    pairs = tuple(TimingPair((0.1, 0.1), (0.21, 0.21)) for _ in range(3))
    timing = TimingOutcome(Verdict.SLOWDOWN, True, 2.1, 0.125, pairs)

    def answer(t: TimingOutcome) -> list[str]:
        ev = FeatureEvidence(timing=t)
        return answer_lines(RunResult(Status.FOUND, Verdict.SLOWDOWN, ("x",), trials=1, run_dir="r", evidence=ev))

    assert not any("p =" in line for line in answer(timing))
    assert any("(p = 0.01)" in line for line in answer(replace(timing, p_value=0.01)))
    assert any("x2.10 over 3 interleaved runs" in line for line in answer(timing))
