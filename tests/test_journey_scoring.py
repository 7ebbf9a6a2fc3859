"""benchmarks/journey_suite.py's scoring of a case whose cost is the machine's (pure, no TF)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from tfrepro.settings import SymptomSettings

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _suite():
    spec = importlib.util.spec_from_file_location("journey_suite", BENCH / "journey_suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


WANT = {"symptom": "slowdown", "culprits": ["mixed_precision"], "planted": {"probe": "planted.py", "min_ratio": 1.5}}
NONE = {"status": "none", "trials": 9}
FOUND = {"status": "found", "symptom": "slowdown", "culprits": ["mixed_precision"], "trials": 12}
OTHER = {"status": "found", "symptom": "slowdown", "culprits": ["prefetch"], "trials": 12}


def _score(doc: dict, below: bool):
    js = _suite()
    out = js.Outcome("mixed_precision_cpu", "zero-edit", "x", below_threshold=below)
    js.score(out, doc, WANT)
    return out.right, out.false_culprit


def test_a_planted_cost_present_here_must_be_found():
    assert _score(FOUND, below=False) == (True, False)
    assert _score(NONE, below=False) == (False, False)
    assert _score(OTHER, below=False) == (False, True)


def test_under_its_min_ratio_none_is_right_too_and_another_culprit_is_still_false():
    assert _score(NONE, below=True) == (True, False)
    assert _score(FOUND, below=True) == (True, False)
    assert _score(OTHER, below=True) == (False, True)
    assert _score({"status": "flaky", "trials": 9}, below=True) == (False, False)


def test_every_planted_case_names_a_probe_that_exists_and_a_ratio_above_the_threshold():
    cases = [p for p in (BENCH / "journey").iterdir() if (p / "expected.json").is_file()]
    planted = [(p, json.loads((p / "expected.json").read_text()).get("planted")) for p in cases]
    planted = [(p, x) for p, x in planted if x]
    assert planted  # mixed_precision_cpu at least
    for case, spec in planted:
        assert (case / spec["probe"]).is_file(), case
        assert float(spec["min_ratio"]) > SymptomSettings().slowdown, case  # above tfrepro's threshold
