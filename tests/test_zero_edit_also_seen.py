"""`also_seen`: the failing configuration's other symptoms are reported (milliseconds)."""

from __future__ import annotations

from test_zero_edit_preflight import NAN, fake, losses, project

from tfrepro.bisect.engine import bisect
from tfrepro.bisect.result_doc import also_seen
from tfrepro.trials.values import AlsoSeen
from tfrepro.verdicts import Verdict


def test_other_symptoms_in_hunting_order_and_a_possible_slowdown():
    got = also_seen({Verdict.MISMATCH}, None, ratio=0.03 / 0.02, slowdown=1.25)
    assert [s.to_dict() for s in got] == [
        {"symptom": "mismatch", "hint": "rerun with --symptom mismatch"},
        {
            "symptom": "slowdown",
            "ratio": 1.5,
            "possible": True,
            "hint": "possible slowdown x1.5 (untimed runs): rerun with --symptom slowdown",
        },
    ]
    assert also_seen({Verdict.MISMATCH}, Verdict.MISMATCH, ratio=0.021 / 0.02, slowdown=1.25) == []
    # a crashed or NaN run says nothing about speed
    assert also_seen({Verdict.NAN, Verdict.CRASH}, Verdict.NAN, ratio=0.2 / 0.02, slowdown=1.25) == [
        AlsoSeen("crash", "rerun with --symptom crash")
    ]


def test_bisect_result_lists_a_slowdown_seen_while_hunting_a_mismatch(tmp_path):
    def behave(on):
        out = {}
        if "jit_compile" in on:
            out["losses"] = tuple(x * 1.5 for x in losses())
        if "prefetch" in on:
            out["step_times"] = (0.5,) * 3 + (0.04,) * 17
        return out

    doc = bisect(project(tmp_path), runner=fake(behave)).to_dict()
    assert doc["symptom"] == "mismatch" and doc["culprits"] == ["jit_compile"]
    assert [s["symptom"] for s in doc["also_seen"]] == ["slowdown"]
    assert doc["also_seen"][0]["ratio"] == 2.0


def test_bisect_result_lists_a_crash_seen_with_the_nan(tmp_path):
    crash_too = {**NAN, "crashed": True, "exit_code": 1, "error": "FloatingPointError"}
    doc = bisect(project(tmp_path), runner=fake(lambda on: crash_too if "jit_compile" in on else {})).to_dict()
    assert doc["symptom"] == "nan"
    assert doc["also_seen"] == [{"symptom": "crash", "hint": "rerun with --symptom crash"}]
